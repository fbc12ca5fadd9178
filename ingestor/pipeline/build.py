"""The first stage of the pipeline: read a folder, chunk, embed, build the layers, store, commit.

An update is: compute in memory → upsert new/changed points (idempotent ids) → commit the state
atomically → delete points no longer referenced. A crash between any two steps leaves either the
previous state with extra points (deleted at the next commit) or the new state fully stored.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from ingestor.errors import SourceError, SourceGoneError, SourceUnavailableError, TreeError
from ingestor.pipeline.reports import BuildReport
from ingestor.pipeline.unread import Unread
from ingestor.pipeline.vectors import embed_leaves, vectors_of
from ingestor.read.chunking import chunk_text
from ingestor.read.documents import Document, iter_documents
from ingestor.read.structure import Outline
from ingestor.read.tokens import Tokenizer, default_tokenizer
from ingestor.tree.build import BuildStats, TreeBuilder
from ingestor.tree.params import Progress
from ingestor.tree.params import no_progress as _noop
from ingestor.tree.persist import (
    begin_intent,
    checkpoint_cache,
    commit_state,
    drop_checkpoint,
    end_intent,
    load_state,
    open_checkpoint,
    pending_intent,
)
from ingestor.tree.state import Node, SourceEntry, TreeState, leaf_id, sha256_text
from models_store import ModelStore, ModelStoreError, RowStore
from retriever import Embedder, NodeStore

log = logging.getLogger(__name__)

T = TypeVar("T")

UPSERT_BATCH = 512


class BuildStage:
    """Builds and stores trees. Adapters are passed in; nothing here builds a client."""

    def __init__(
        self,
        *,
        tree: str,
        embedder: Embedder,
        builder: TreeBuilder,
        store: NodeStore,
        models: ModelStore,
        chunk_tokens: int = 250,
        chunk_overlap: int = 50,
        max_file_bytes: int = 50_000_000,
        ignore: list[str] | None = None,
        tokenizer: Tokenizer | None = None,
        drift_threshold: float = 0.3,
        ocr: bool = False,
        text_suffixes: Sequence[str] = (),
    ) -> None:
        self.tree = tree
        self.embedder = embedder
        self.builder = builder
        self.store = store
        self.models = models
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.max_file_bytes = max_file_bytes
        self.ignore = ignore
        self.tokenizer = tokenizer or default_tokenizer()
        self.drift_threshold = drift_threshold
        self.ocr = ocr
        self.text_suffixes = tuple(text_suffixes)
        #: Write an update's new leaves before adRAP places them, so they are searchable at once.
        self.leaves_first = True
        #: Files skipped or stale, and why (the CLI and the daemon give it a file in the state dir).
        self.unread = Unread()

    def read(self, root: Path, report: BuildReport, progress: Progress) -> list[Document]:
        """Read every supported file under ``root``; log and record each skipped one."""
        docs: list[Document] = []
        kwargs = {} if self.ignore is None else {"ignore": self.ignore}
        items = iter_documents(
            root,
            max_bytes=self.max_file_bytes,
            ocr=self.ocr,
            text_suffixes=self.text_suffixes,
            **kwargs,
        )
        for path, item in items:
            if isinstance(item, SourceError):
                source = _relative(path, root)
                kind: Literal["skipped", "stale"] = (
                    "stale"
                    if isinstance(item, SourceUnavailableError | SourceGoneError)
                    else "skipped"
                )
                if path.is_dir() and kind == "stale":
                    source += "/"
                if self.unread.note(source, kind, str(item), stat_or_none(path), kept=False):
                    log.warning("%s %s: %s", kind, path, item)
                report.skipped.append((source, str(item)))
                continue
            self.unread.clear(item.source)
            docs.append(item)
            progress("read", len(docs), 0)
        self.unread.flush()
        return docs

    def leaves_of(self, doc: Document) -> list[Node]:
        """Chunk one document into leaf nodes (ids stable while a chunk's text is unchanged)."""
        seen: Counter[str] = Counter()
        out = []
        chunks = chunk_text(
            doc.text,
            max_tokens=self.chunk_tokens,
            overlap=self.chunk_overlap,
            tokenizer=self.tokenizer,
        )
        outline = Outline(doc.text, doc.regions)
        for chunk in chunks:
            digest = sha256_text(chunk.text)
            node_id = leaf_id(self.tree, doc.source, digest, seen[digest])
            seen[digest] += 1
            out.append(
                Node(
                    node_id=node_id,
                    layer=0,
                    text=chunk.text,
                    n_tokens=chunk.n_tokens,
                    content_hash=digest,
                    sources=frozenset({doc.source}),
                    source=doc.source,
                    chunk_index=chunk.index,
                    char_start=chunk.char_start,
                    char_end=chunk.char_end,
                    section=outline.section(chunk.char_start, chunk.char_end),
                    locator=outline.locator(chunk.char_start, chunk.char_end),
                )
            )
        return out

    def build(self, root: Path, progress: Progress = _noop) -> BuildReport:
        """Build the whole tree over ``root`` from scratch and store it.

        Paid work survives a stop or a kill: leaf vectors go to the node store as they are
        embedded (a first build, see :func:`~ingestor.pipeline.vectors.embed_leaves`) and
        summaries to the state database or, before the first commit, to a checkpoint beside it
        (see :meth:`build_layers`); run again, the build takes both back instead of paying for
        them again.
        """
        t_start = time.perf_counter()
        state = TreeState(
            tree=self.tree,
            root=str(root.resolve()),
            embed_model=self.embedder.model_id,
            dim=self.embedder.dim,
        )
        previous = self.open_state()
        if previous is not None:  # a rebuild re-summarises only what changed
            state.summary_cache = previous.summary_cache
            state.generation = previous.generation
            if drop_checkpoint(self.models, self.tree):  # imported by the commit that made it
                log.info("removed the summary checkpoint of an already committed build")
            return self._build(state, previous.rows, progress, t_start, first=False)
        rows = self._guard(lambda: open_checkpoint(self.models, state), "open a checkpoint beside")
        try:
            report = self._build(state, rows, progress, t_start, first=True)
        finally:
            rows.close()
        drop_checkpoint(self.models, self.tree)  # the commit imported it into the state's cache
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
        report = BuildReport()
        stats = report.stats
        t0 = time.perf_counter()
        docs = self.read(Path(state.root), report, progress)
        leaves: list[Node] = []
        for doc in docs:
            doc_leaves = self.leaves_of(doc)
            leaves.extend(doc_leaves)
            state.sources[doc.source] = SourceEntry(
                doc.content_hash,
                doc.size,
                doc.mtime,
                [n.node_id for n in doc_leaves],
                doc.mtime_ns,
                doc.inode,
            )
        stats.add_time("read_chunk", time.perf_counter() - t0)
        report.files = len(docs)

        with bulk_writes(self.store):  # one index build, after every point is written
            t0 = time.perf_counter()
            embed_leaves(
                state,
                leaves,
                store=self.store,
                embedder=self.embedder,
                tree=self.tree,
                progress=progress,
                checkpoint=first,
            )
            stats.add_time("embed_leaves", time.perf_counter() - t0)

            built = self.build_layers(state, cache_rows, progress)
            built.seconds = stats.seconds | built.seconds  # read and embed stages first
            report.stats = stats = built

            t0 = time.perf_counter()
            self.store_state(state, progress)
            stats.add_time("store", time.perf_counter() - t0)
        report.leaves = len(leaves)
        report.layers = state.layer_counts()
        report.seconds = time.perf_counter() - t_start
        return report

    def build_layers(
        self, state: TreeState, cache_rows: RowStore | None, progress: Progress
    ) -> BuildStats:
        """Build the summary layers, storing each batch of paid summaries in ``cache_rows``.

        ``cache_rows`` is the database ``state.summary_cache`` is bound to (the committed
        state's, or a first build's checkpoint): a build stopped or killed half-way leaves its
        summaries there and the next build takes them from the cache. Nothing else is written
        (no tree is committed here), so readers keep seeing the previous tree, or none.
        """
        if cache_rows is None:
            return self.builder.build(state, progress)
        rows = cache_rows

        def checkpoint(s: TreeState) -> None:
            self._guard(lambda: checkpoint_cache(s, rows), "write the summary checkpoint to")

        self.builder.checkpoint = checkpoint
        try:
            return self.builder.build(state, progress)
        finally:
            self.builder.checkpoint = None

    def _guard(self, action: Callable[[], T], what: str) -> T:
        """Run a state-database ``action``, turning its failure into a TreeError with the fix."""
        try:
            return action()
        except (OSError, ModelStoreError) as exc:
            raise TreeError(
                f"cannot {what} the tree state in {self.models.root}: {exc}; check free space "
                "and permissions of ADRAP_STATE_DIR, then run the command again"
            ) from exc

    def open_state(self, *, recover: bool = False) -> TreeState | None:
        """Return the committed state (its vectors read from the store on demand), or None.

        Args:
            recover: finish or undo an interrupted update first (see :meth:`recover`); only the
                holder of the writer lock may, since another process's update in flight looks
                the same.
        """
        state = load_state(self.models, self.tree, self.embedder)
        if state is not None:
            state.vectors.fetch = self.store.retrieve_vectors
            if recover:
                self.recover(state)
        return state

    def recover(self, state: TreeState) -> int:
        """Repair the store after an update interrupted by a crash; return the points repaired.

        The update's intent names every point it was writing and deleting. Committed: its
        deletes are redone. Not committed: the points it wrote are put back as the committed
        state has them (re-embedded if a point is gone), and points of nodes the state does not
        have are deleted. Either way the cost is the size of that update, not of the tree.
        """
        intent = pending_intent(state)
        if intent is None:
            return 0
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        if intent.committed:
            doomed = [i for i in intent.delete if i not in state.nodes]
            restore: list[str] = []
        else:
            doomed = [i for i in intent.upsert if i not in state.nodes]
            restore = [i for i in intent.upsert if i in state.nodes]
        for start in range(0, len(restore), UPSERT_BATCH):
            batch = restore[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), self.vectors_of(state, batch))
        if doomed:
            self.store.delete(doomed)
        self._intent(state, None, None)
        log.info(
            "recovered tree %r from an interrupted update: %d points restored, %d deleted",
            self.tree,
            len(restore),
            len(doomed),
        )
        return len(restore) + len(doomed)

    def vectors_of(self, state: TreeState, ids: list[str]) -> NDArray[np.float32]:
        """Return the vectors of nodes, embedding their texts again where the store lost them."""
        return vectors_of(state, ids, store=self.store, embedder=self.embedder)

    def _intent(self, state: TreeState, upsert: list[str] | None, delete: list[str] | None) -> None:
        try:
            if upsert is None:
                end_intent(state)
            else:
                begin_intent(state, upsert, delete or [])
        except (OSError, ModelStoreError) as exc:
            raise TreeError(
                f"cannot write to the tree state in {self.models.root}: {exc}; check free space "
                "and permissions of ADRAP_STATE_DIR, then run the command again"
            ) from exc

    def require_state(self, *, recover: bool = False) -> TreeState:
        """Return the committed state, or explain that the tree must be built first.

        Args:
            recover: as for :meth:`open_state` (writers pass True).
        """
        state = self.open_state(recover=recover)
        if state is None:
            raise TreeError(
                f"tree {self.tree!r} has not been built in {self.models.root.parent}; "
                "run `adrap build DIR` first"
            )
        return state

    def rebuild(self, progress: Progress = _noop) -> BuildReport:
        """Rebuild every summary layer over the current leaves (summary cache reused)."""
        t0 = time.perf_counter()
        state = self.require_state(recover=True)
        report = BuildReport(files=len(state.sources), leaves=state.layer_counts().get(0, 0))
        report.stats = self.build_layers(state, state.rows, progress)
        with bulk_writes(self.store):
            self.store_state(state, progress)
        report.layers = state.layer_counts()
        report.seconds = time.perf_counter() - t0
        return report

    def _commit(self, state: TreeState) -> None:
        try:
            self.store.flush()  # the points are durable before the state that references them
            commit_state(self.models, state)
        except (OSError, ModelStoreError) as exc:
            raise TreeError(
                f"cannot commit the tree state to {self.models.root}: {exc}; check free space and "
                "permissions of ADRAP_STATE_DIR, then run the command again"
            ) from exc

    def store_state(self, state: TreeState, progress: Progress = _noop) -> None:
        """Upsert every node, commit the state, then delete points the state no longer has."""
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        ids = list(state.nodes)
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))
            progress("store", start + len(batch), len(ids))
        self.store.optimize()  # embedded: build the HNSW index once, after the bulk write
        self._commit(state)
        orphans = [i for i in self.store.iter_ids(self.tree) if i not in state.nodes]
        if orphans:
            self.store.delete(orphans)
            log.info("deleted %d points no longer in tree %r", len(orphans), self.tree)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def stat_or_none(path: Path) -> os.stat_result | None:
    """``path.stat()``, or None where it cannot be had."""
    try:
        return path.stat()
    except OSError:
        return None


def bulk_writes(store: NodeStore) -> AbstractContextManager[None]:
    """The store's bulk-write mode where it has one (embedded: no index build per upsert batch,
    see :meth:`~retriever.edge_shard.EdgeShardLifecycle.bulk_writes`); a server indexes by
    itself."""
    bulk = getattr(store, "bulk_writes", None)
    return bulk() if bulk is not None else nullcontext()
