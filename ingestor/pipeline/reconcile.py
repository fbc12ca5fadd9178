"""The pipeline: the stages composed, and bringing a stored tree to agree with its folder.

:class:`Pipeline` is what the CLI and the daemon hold. It is made of a
:class:`~ingestor.pipeline.context.TreeContext` (the tree's adapters and crash-safe writes), a
:class:`~ingestor.pipeline.collect.Collector` (reads the folder), a
:class:`~ingestor.pipeline.build.BuildStage` (builds from scratch) and an
:class:`~ingestor.pipeline.apply.ApplyStage` (updates in place with adRAP), each given the
parts it uses; its own work is :meth:`Pipeline.reconcile`, after a crash or downtime.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ingestor.config import REBUILD_MAX_LEAVES
from ingestor.errors import TreeError
from ingestor.pipeline.access import TreeAccess
from ingestor.pipeline.apply import ApplyStage
from ingestor.pipeline.budget import ReadBudget
from ingestor.pipeline.build import BuildStage
from ingestor.pipeline.collect import Collector
from ingestor.pipeline.context import UPSERT_BATCH, TreeContext, by_access
from ingestor.pipeline.readers import ReadWorkers
from ingestor.pipeline.reports import BuildReport, UpdateReport
from ingestor.pipeline.unread import Unread
from ingestor.read.documents import Document
from ingestor.read.tokens import Tokenizer
from ingestor.tree.adrap import UpdateStats
from ingestor.tree.build import TreeBuilder
from ingestor.tree.changelog import Retention
from ingestor.tree.params import Progress, no_progress
from ingestor.tree.state import CHUNKER_PARAM, TreeState
from models_store import ModelStore
from retriever import Embedder, NodeStore

log = logging.getLogger(__name__)

#: Seconds between the permission passes a change of embedding model runs as it copies.
COPY_PASS_SECONDS = 2.0


class Pipeline:
    """The data path, short and visible: folder → chunks → embeddings → tree → Qdrant → state.

    Adapters and settings are passed in, once; nothing here builds a client. Each lives in
    the part that uses it, a plain attribute read there: ``context`` (the tree's name,
    ``embedder``, ``builder``, ``store``, ``models``, ``access``), ``collector`` (``unread``,
    the reader processes), ``build_stage`` (``chunk_tokens``, ``tokenizer``) and
    ``apply_stage`` (``drift_threshold``, ``rebuild_max_leaves``, ``leaves_first``,
    ``defer_summaries``).

    With ``read_budget`` every file is read and chunked in reader processes, each file under
    that budget (:mod:`ingestor.pipeline.readers`: the CLI and the daemon); without, here.
    """

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
        rebuild_max_leaves: int = REBUILD_MAX_LEAVES,
        leaves_first: bool = True,
        ocr: bool = False,
        text_suffixes: Sequence[str] = (),
        access: TreeAccess | None = None,
        read_budget: ReadBudget | None = None,
        unread: Unread | None = None,
        defer_summaries: Callable[[], bool] | None = None,
        retention: Retention | None = None,
        model_change: Callable[[], object] | None = None,
    ) -> None:
        self.context = TreeContext(
            tree=tree,
            embedder=embedder,
            builder=builder,
            store=store,
            models=models,
            access=access,
            retention=retention,
            model_change=model_change,
        )
        self.collector = Collector(
            max_file_bytes=max_file_bytes,
            ignore=ignore,
            ocr=ocr,
            text_suffixes=text_suffixes,
            readers=ReadWorkers(read_budget) if read_budget is not None else None,
            unread=unread,
            workers=builder.summaries.workers,
        )
        self.build_stage = BuildStage(
            self.context,
            self.collector,
            chunk_tokens=chunk_tokens,
            chunk_overlap=chunk_overlap,
            tokenizer=tokenizer,
        )
        self.collector.chunker = self.build_stage.chunker  # updates are chunked where read
        self.apply_stage = ApplyStage(
            self.context,
            self.build_stage,
            self.collector,
            drift_threshold=drift_threshold,
            rebuild_max_leaves=rebuild_max_leaves,
            leaves_first=leaves_first,
            defer_summaries=defer_summaries,
        )
        if hasattr(model_change, "between"):  # a change of model: its copy runs the passes
            model_change.between = _weakly(self.reclass_during_copy)  # type: ignore[union-attr]
        self._copy_pass_due = 0.0

    def stop_reading_when(self, stop: threading.Event) -> None:
        """Once ``stop`` is set, cut reading short within seconds, whatever a reader process
        is doing (:meth:`~ingestor.pipeline.readers.ReadWorkers.stop_when`)."""
        if self.collector.readers is not None:
            self.collector.readers.stop_when(stop)

    def warm_readers(self) -> None:
        """Start a reader process ahead of the first read (:meth:`ReadWorkers.warm`)."""
        if self.collector.readers is not None:
            self.collector.readers.warm()

    def refresh(self, state: TreeState | None = None, *, rewrite: bool = False) -> UpdateReport:
        """Regenerate every stale summary once (see :meth:`ApplyStage.refresh`)."""
        return self.apply_stage.refresh(state or self.require_state(recover=True), rewrite=rewrite)

    # -- the stages' work ----------------------------------------------------------------------

    def build(self, root: Path, progress: Progress = no_progress) -> BuildReport:
        """Build the whole tree over ``root`` from scratch and store it (:meth:`BuildStage.build`)."""
        return self.build_stage.build(root, progress)

    def rebuild(self, progress: Progress = no_progress) -> BuildReport:
        """Rebuild every summary layer over the current leaves (:meth:`BuildStage.rebuild`)."""
        return self.build_stage.rebuild(progress)

    def update(self, paths: list[Path], *, remove: bool = False) -> UpdateReport:
        """Bring the tree up to date with ``paths`` (:meth:`ApplyStage.update`)."""
        return self.apply_stage.update(paths, remove=remove)

    def collect(
        self,
        state: TreeState,
        paths: list[Path],
        report: UpdateReport,
        held: Callable[[str, Path], bool] | None = None,
    ) -> tuple[list[Document], list[str]]:
        """Read what changed under ``paths`` and name the gone sources (:meth:`Collector.collect`)."""
        return self.collector.collect(state, paths, report, held)

    def apply_batch(
        self,
        state: TreeState,
        docs: list[Document],
        gone: list[str],
        report: UpdateReport,
        known: dict[str, NDArray[np.float32]] | None = None,
    ) -> None:
        """Apply one batch, reusing removed leaves' vectors and ``known`` ones (vectors of
        texts embedded ahead; :meth:`ApplyStage.apply_batch`)."""
        self.apply_stage.apply_batch(state, docs, gone, report, known)

    def new_leaf_texts(
        self, state: TreeState, doc: Document, reused: Collection[str] = frozenset()
    ) -> list[str]:
        """Return the texts of ``doc``'s leaves that ``state`` does not hold yet, less those in
        ``reused`` (:func:`~ingestor.pipeline.vectors.removed_leaf_texts` of the same update's
        removed sources: a rename): what applying it would embed."""
        leaves = self.build_stage.leaves_of(doc)
        return [
            n.text for n in leaves if state.nodes.peek(n.node_id) is None and n.text not in reused
        ]

    def update_access(
        self, state: TreeState, report: UpdateReport | None = None, *, ensure: bool = True
    ) -> UpdateReport:
        """Read every indexed file's permissions again and apply the changed ones as one update
        (:meth:`ApplyStage.reclass`): a chmod, chown, setfacl or a folder's change reaches the
        points' access classes without reading, embedding or summarising anything.

        The folder's files whose permissions cannot be read now become readable by nobody
        (but the owner) until they can."""
        report = report if report is not None else UpdateReport()
        changed = self.context.access.changed(state)
        if changed:
            t0 = time.perf_counter()
            sub = UpdateReport()
            self.apply_stage.reclass(state, changed, sub, ensure=ensure)
            report.files_reclassed += sub.files_reclassed
            report.stats.upserted |= sub.stats.upserted
            report.seconds += time.perf_counter() - t0
        self.context.access.forget_unnamed(state)  # the classes the points name now
        return report

    def reclass_during_copy(
        self, state: TreeState, copy: NodeStore, copied: Callable[[str], bool]
    ) -> None:
        """A permission pass while a change of embedding model copies the tree (it runs no
        other: updates wait for it, and it may take hours): the changed files' classes go to
        the state, the live store and the new store's nodes already copied (``copied``); the
        copy takes the rest from the state. Run at most every
        :data:`COPY_PASS_SECONDS`, and then only if the last pass took under a tenth of the
        time since (as the daemon's passes). A kill between the commit and the new store's
        write is mended by the store check that follows every switch (:meth:`reconcile_store`).
        """
        now = time.monotonic()
        if now < self._copy_pass_due:
            return
        report = self.update_access(state, ensure=False)
        took = time.monotonic() - now
        self._copy_pass_due = now + max(COPY_PASS_SECONDS, 10 * took)
        ids = sorted(i for i in report.stats.upserted if i in state.nodes and copied(i))
        if ids:
            copy.set_access(by_access(state, ids))
            copy.flush()
            log.info(
                "permissions changed during the model change: %d files, %d nodes of the new "
                "store rewritten",
                report.files_reclassed,
                len(ids),
            )

    def open_state(self, *, recover: bool = False) -> TreeState | None:
        """Return the committed state, or None (:meth:`TreeContext.open_state`)."""
        return self.context.open_state(recover=recover)

    def require_state(self, *, recover: bool = False) -> TreeState:
        """Return the committed state, or explain the build it needs first."""
        return self.context.require_state(recover=recover)

    def vectors_of(self, state: TreeState, ids: list[str]) -> NDArray[np.float32]:
        """Return the vectors of nodes, embedding their texts again where the store lost them."""
        return self.context.vectors_of(state, ids)

    # -- reconciliation ------------------------------------------------------------------------

    def reconcile(self, root: Path, progress: Progress = no_progress) -> UpdateReport:
        """Bring the stored tree to agree with the folder ``root`` after any crash or downtime.

        First run (no state): a full ``build``. Otherwise the folder is compared with the source
        index by content hash and the difference applied as one adRAP batch; then the store's
        points of the tree are compared with the state's nodes (see ``reconcile_store``).

        Raises:
            TreeError: the state was built over another root folder.
        """
        t0 = time.perf_counter()
        report = UpdateReport()
        root = root.resolve()
        state = self.context.open_state(recover=True)
        if state is None:
            built = self.build_stage.build(root, progress)
            report.files_added = built.files
            report.skipped = built.skipped
            report.stats = UpdateStats(
                leaves_added=built.leaves,
                summaries_regenerated=built.stats.summary_calls,
                summary_cache_hits=built.stats.cache_hits,
                summary_tokens=built.stats.summary_tokens,
                summary_input_tokens=built.stats.summary_input_tokens,
            )
            report.rebuilt, report.rebuilt_why = True, "first build"
            report.seconds = time.perf_counter() - t0
            return report
        if Path(state.root) != root:
            raise TreeError(
                f"tree {self.context.tree!r} in {self.context.models.root.parent} was built over "
                f"{state.root!r}, not {str(root)!r}; watch that folder, or use another ADRAP_TREE "
                f"or ADRAP_STATE_DIR; if the share moved there, `adrap relocate {root}` moves "
                "the tree with it (nothing embedded again)"
            )
        docs, gone = self.collector.collect(state, [root], report)
        if CHUNKER_PARAM not in state.params:  # a tree older than the record: chunked as now,
            state.params[CHUNKER_PARAM] = self.build_stage.chunker.key  # so a later change counts
            self.context.commit(state)
        self.apply_batch(state, docs, gone, report)
        self.update_access(state, report)  # chmod/chown/setfacl while stopped: no content read
        self.reconcile_store(state)
        report.seconds = time.perf_counter() - t0
        return report

    def reconcile_store(self, state: TreeState) -> tuple[int, int]:
        """Make the store's points of the tree equal to the state's nodes, payloads included.

        Deletes points the state does not reference (orphans of an update interrupted before its
        last step) and upserts nodes whose point is missing or whose payload differs (an update
        interrupted between its upsert and its commit). Returns ``(deleted, upserted)``.
        """
        ctx = self.context
        ctx.store.ensure_collection(ctx.embedder.dim, ctx.embedder.model_id)
        stored = set(ctx.store.iter_ids(ctx.tree))
        orphans = sorted(stored - state.nodes.keys())
        stale = [i for i in state.nodes if i not in stored]
        present = [i for i in state.nodes if i in stored]
        for start in range(0, len(present), UPSERT_BATCH):
            batch = present[start : start + UPSERT_BATCH]
            found = {p.node_id: p for p in ctx.store.retrieve(batch)}
            for want in state.payloads(batch):
                if found.get(want.node_id) != want:
                    stale.append(want.node_id)
        for start in range(0, len(stale), UPSERT_BATCH):
            batch = stale[start : start + UPSERT_BATCH]
            ctx.store.upsert(state.payloads(batch), ctx.vectors_of(state, batch))
        if orphans:
            ctx.store.delete(orphans)
        if orphans or stale:
            log.info(
                "reconciled store of tree %r: deleted %d orphan points, re-stored %d nodes",
                ctx.tree,
                len(orphans),
                len(stale),
            )
        return len(orphans), len(stale)


def _weakly(
    method: Callable[[TreeState, NodeStore, Callable[[str], bool]], None],
) -> Callable[..., None]:
    """``method`` through a weak reference: the change of model the pipeline holds does not
    keep the pipeline (and a killed change's new store, closed when collected) alive."""
    ref = weakref.WeakMethod(method)

    def call(state: TreeState, copy: NodeStore, copied: Callable[[str], bool]) -> None:
        bound = ref()
        if bound is not None:
            bound(state, copy, copied)

    return call
