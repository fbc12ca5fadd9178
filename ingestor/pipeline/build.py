"""The build stage: chunk documents into leaves, embed them, build the summary layers, store.

A build reads the whole folder (through the :class:`~ingestor.pipeline.collect.Collector`),
makes every leaf, embeds them, builds the layers and stores the tree through the
:class:`~ingestor.pipeline.context.TreeContext` (upserts, commit, then deletes). The apply stage
uses this one to chunk a changed document and for a drift rebuild.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator
from pathlib import Path

from ingestor.cluster.parallel import shared_pools, worker_pool
from ingestor.pipeline.checkpoint import CheckpointVectors
from ingestor.pipeline.chunker import ChunkedDocument, Chunker
from ingestor.pipeline.collect import Collector, source_entry
from ingestor.pipeline.context import TreeContext, bulk_writes
from ingestor.pipeline.reports import BuildReport
from ingestor.pipeline.vectors import LeafEmbedding
from ingestor.read.documents import Document
from ingestor.read.tokens import Tokenizer, default_tokenizer
from ingestor.tree import changelog
from ingestor.tree.build import BuildStats
from ingestor.tree.changelog import FileChange
from ingestor.tree.params import Progress, no_progress
from ingestor.tree.persist import (
    checkpoint_cache,
    drop_checkpoint,
    fill_pending,
    load_state,
    open_checkpoint,
)
from ingestor.tree.state import CHUNKER_PARAM, Node, TreeState
from ingestor.tree.vector_map import VectorMap
from models_store import RowStore
from retriever.heap import release_freed_heap

__all__ = ["BuildStage"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _timed(report: BuildReport, stage: str) -> Iterator[None]:
    """Add the block's seconds to ``report``'s stage, its wall, and the builder's CPU."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        seconds = time.perf_counter() - t0
        report.stats.add_time(stage, seconds)
        report.seconds += seconds
        report.cpu[stage] = report.cpu.get(stage, 0.0) + time.process_time() - c0


class BuildStage:
    """Builds and stores trees from scratch. Given its context and collector; builds no client.

    Attributes:
        context: the tree's adapters and crash-safe writes (shared with the apply stage).
        collector: reads the folder.
        chunk_tokens, chunk_overlap: chunk size and overlap in tokens (``ADRAP_CHUNK__*``).
        tokenizer: counts the tokens (cl100k by default).

    A build reads and chunks its files on the tree builder's worker processes
    (:attr:`~ingestor.tree.build.TreeBuilder.workers`, ``ADRAP_BUILD__WORKERS``), the ones its
    clustering and summaries use: the leaves are the same for any number.
    """

    def __init__(
        self,
        context: TreeContext,
        collector: Collector,
        *,
        chunk_tokens: int = 250,
        chunk_overlap: int = 50,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self.context = context
        self.collector = collector
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.tokenizer = tokenizer or default_tokenizer()

    @property
    def chunker(self) -> Chunker:
        """This stage's chunking, as a picklable callable."""
        return Chunker(self.context.tree, self.chunk_tokens, self.chunk_overlap, self.tokenizer)

    def leaves_of(self, doc: Document) -> list[Node]:
        """Chunk one document into leaf nodes (see :class:`Chunker`): those its reader process
        made, if it chunks as this stage does."""
        chunker = self.chunker
        if isinstance(doc, ChunkedDocument) and doc.chunker == chunker:
            return list(doc.leaves)
        return chunker(doc)

    def build(self, root: Path, progress: Progress = no_progress) -> BuildReport:
        """Build the whole tree over ``root`` from scratch and store it.

        Paid work survives a stop or a kill: summaries go to the state database or, before the
        first commit, to a checkpoint beside it (see :meth:`build_layers`), and a first build's
        node vectors to that checkpoint as they are embedded (:class:`LeafEmbedding`); run
        again, the build takes both back instead of paying for them again.

        The built state is committed and let go: its cycles are collected and the heap it held
        is handed back to the OS (glibc keeps freed heap otherwise; 26k leaves: 730 -> 440 MiB
        of anonymous memory kept by the process after the build). Only then does a first build
        write its points (:meth:`TreeContext.fill_store`, from the state database and the
        checkpoint, a batch at a time), and is the store indexed (the ``index`` stage), so that
        the engine's memory never adds to the tree's.
        """
        with shared_pools():  # reads, clustering and summaries share the worker processes
            report = self._build_over(root, progress)
        gc.collect()  # the state's layers hold reference cycles (their rows' loaders)
        release_freed_heap()
        state = load_state(self.context.models, self.context.tree, layers=False)  # no model
        if state is not None and fill_pending(state):
            with _timed(report, "store"):
                self.context.fill_store(state, progress)
        del state
        with _timed(report, "index"):
            self.context.store.optimize()
        release_freed_heap()  # what the index build freed
        return report

    def _build_over(self, root: Path, progress: Progress) -> BuildReport:
        t_start = time.perf_counter()
        ctx = self.context
        state = TreeState(
            tree=ctx.tree,
            root=str(root.resolve()),
            embed_model=ctx.embedder.model_id,
            dim=ctx.embedder.dim,
            params={CHUNKER_PARAM: self.chunker.key},  # every file is chunked now
        )
        previous = ctx.open_state(recover=True)  # a first build killed in its fill: finished
        if previous is not None:  # a rebuild re-summarises only what changed
            state.summary_cache = previous.summary_cache
            state.generation = previous.generation
            if drop_checkpoint(ctx.models, ctx.tree):  # imported by the commit that made it
                log.info("removed the summary checkpoint of an already committed build")
            return self._build(state, previous.rows, progress, t_start, first=False)
        rows = ctx.guard(lambda: open_checkpoint(ctx.models, state), "open a checkpoint beside")
        try:
            report = self._build(state, rows, progress, t_start, first=True)
        finally:
            rows.close()  # deleted once the points are written (fill_store)
        return report

    def _build(
        self,
        state: TreeState,
        cache_rows: RowStore | None,
        progress: Progress,
        t_start: float,
        *,
        first: bool,
    ) -> BuildReport:
        ctx = self.context
        report = BuildReport()
        stats = report.stats
        kept = CheckpointVectors(cache_rows) if first and cache_rows is not None else None
        ctx.store.ensure_collection(ctx.embedder.dim, ctx.embedder.model_id)  # fails early
        with bulk_writes(ctx.store):  # one index build, after every point is written
            c0 = time.process_time()
            leaves = self._read_and_embed(state, report, progress, checkpoint=kept)
            c1 = time.process_time()
            built = self.build_layers(state, cache_rows, progress, spill=first)
            c2 = time.process_time()
            report.cpu.update(read_embed=c1 - c0, layers=c2 - c1)
            built.seconds = stats.seconds | built.seconds  # read and embed stages first
            report.stats = stats = built

            record = changelog.note(
                state,
                "build",
                started_at=time.time() - (time.perf_counter() - t_start),
                files=(FileChange(s, "added", e.access) for s, e in state.sources.items()),
                summaries=(i for i, n in state.nodes.items() if n.layer > 0),
            )
            record.leaves_added = state.layer_counts().get(0, 0)
            t0, c0 = time.perf_counter(), time.process_time()
            if kept is not None:  # its points are written once the tree is let go (build)
                kept.put([i for i, n in state.nodes.items() if n.layer > 0], state.matrix)
                state.vectors = VectorMap(state.clock)  # all in the checkpoint; none written
                ctx.commit(state, unstored=True)
                stage = "commit"
            else:
                ctx.store_state(state, progress, index=False)  # indexed once let go
                stage = "store"
            stats.add_time(stage, time.perf_counter() - t0)
            report.cpu[stage] = report.cpu.get(stage, 0.0) + time.process_time() - c0
        report.leaves = leaves.leaves
        report.layers = state.layer_counts()
        report.seconds = time.perf_counter() - t_start
        return report

    def _read_and_embed(
        self,
        state: TreeState,
        report: BuildReport,
        progress: Progress,
        *,
        checkpoint: CheckpointVectors | None,
    ) -> LeafEmbedding:
        """Read, chunk and embed every document under the root, recording its source entry;
        return what embedded them (the leaves it made).

        Files are read and chunked on the build's worker processes, a few ahead, while this
        process embeds the leaves of those before (:class:`LeafEmbedding`), and are taken in
        listing order: the same leaves for any number of workers. A few documents' texts are
        held at a time (their leaves carry their chunks' texts): a build that listed the
        documents first held every text until the end (26k leaves: ~1.6 KB a leaf).

        Stages: ``read_chunk`` is the time spent waiting for documents (what embedding did not
        hide), ``embed_leaves`` the time embedding and storing them.
        """
        ctx = self.context
        leaves = LeafEmbedding(
            state, embedder=ctx.embedder, progress=progress, checkpoint=checkpoint
        )
        waited = 0.0
        ctx.access.begin(state.root)
        with leaves, worker_pool(ctx.builder.summaries.workers) as pool:
            docs = self.collector.iter_all(Path(state.root), report, progress, self.chunker, pool)
            while True:
                t0 = time.perf_counter()
                read = next(docs, None)
                waited += time.perf_counter() - t0
                if read is None:
                    break
                doc, doc_leaves = read
                report.files += 1
                access = ctx.access.class_of(state.root, doc.source)
                classes = frozenset({access})
                for n in doc_leaves:
                    n.access = classes
                state.sources[doc.source] = source_entry(
                    doc, [n.node_id for n in doc_leaves], access
                )
                del doc, read  # its text: the leaves carry theirs
                leaves.add(doc_leaves)
            leaves.finish()
        report.stats.add_time("read_chunk", waited)
        report.stats.add_time("embed_leaves", leaves.seconds)
        return leaves

    def build_layers(
        self,
        state: TreeState,
        cache_rows: RowStore | None,
        progress: Progress,
        *,
        spill: bool = False,
    ) -> BuildStats:
        """Build the summary layers, storing each batch of paid summaries in ``cache_rows``.

        ``cache_rows`` is the database ``state.summary_cache`` is bound to (the committed
        state's, or a first build's checkpoint): a build stopped or killed half-way leaves its
        summaries there and the next build takes them from the cache. ``spill`` (a first
        build's checkpoint): the layers' local models go there too, each as it is fitted
        (:mod:`ingestor.tree.model_rows`). No tree is committed here, so readers keep seeing
        the previous tree, or none.
        """
        builder = self.context.builder
        if cache_rows is None:
            return builder.build(state, progress)
        rows = cache_rows

        def checkpoint(s: TreeState) -> None:
            self.context.guard(lambda: checkpoint_cache(s, rows), "write the summary checkpoint to")

        return builder.build(
            state, progress, checkpoint=checkpoint, spill_to=rows if spill else None
        )

    def rebuild(self, progress: Progress = no_progress) -> BuildReport:
        """Rebuild every summary layer over the current leaves (summary cache reused)."""
        t0 = time.perf_counter()
        state = self.context.require_state(recover=True)
        report = BuildReport(files=len(state.sources), leaves=state.layer_counts().get(0, 0))
        report.stats = self.build_layers(state, state.rows, progress)
        with bulk_writes(self.context.store):
            self.context.store_state(state, progress)
        report.layers = state.layer_counts()
        report.seconds = time.perf_counter() - t0
        return report
