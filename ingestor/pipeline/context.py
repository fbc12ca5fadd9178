"""What the stages of one tree share: its adapters, and the crash-safe writes to its two stores.

The tree lives in two stores, the node store (Qdrant: points) and the state database (the
tree's rows). An update is: compute in memory → record the intent (the points it writes and
deletes) → upsert new/changed points (idempotent ids) → commit the state atomically → delete
points no longer referenced → drop the intent. A crash between any two steps leaves either the
previous state with extra points or the new state fully stored, and :meth:`TreeContext.recover`
repairs the store from the intent alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from ingestor.errors import TreeError
from ingestor.pipeline.access import TreeAccess
from ingestor.pipeline.checkpoint import CheckpointVectors
from ingestor.pipeline.overlap import ahead
from ingestor.pipeline.vectors import vectors_of
from ingestor.tree import changelog
from ingestor.tree.build import TreeBuilder
from ingestor.tree.changelog import Retention
from ingestor.tree.params import Progress
from ingestor.tree.persist import (
    begin_intent,
    checkpoint_path,
    commit_state,
    drop_checkpoint,
    end_fill,
    end_intent,
    fill_pending,
    load_state,
    pending_intent,
)
from ingestor.tree.state import SUMMARIZER_PARAM, SUMMARY_FORM_PARAM, TreeState
from models_store import Changes, ModelStore, ModelStoreError, RowStore
from retriever import Embedder, NodeStore
from retriever.schema import NodePayload

__all__ = ["UPSERT_BATCH", "TreeContext", "bulk_writes"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Points per upsert request.
UPSERT_BATCH = 512


class TreeContext:
    """One tree's adapters, given to each stage, and the writes that keep its stores agreeing.

    Attributes:
        tree: the tree's name (``ADRAP_TREE``); its points carry it.
        embedder: embeds leaves (and, through ``builder``, summaries); its ``dim`` and
            ``model_id`` shape the collection.
        builder: builds the summary layers (its clusterer and summariser).
        store: the node store the points are written to (the daemon wraps it in a lock).
        models: the state directory's model store; the state database lives in it.
        access: reads each file's access class and keeps the registry queries judge them by.
        retention: how much of the change log each commit keeps (``ingestor.tree.changelog``).
        model_change: see :attr:`model_change`.
    """

    def __init__(
        self,
        *,
        tree: str,
        embedder: Embedder,
        builder: TreeBuilder,
        store: NodeStore,
        models: ModelStore,
        access: TreeAccess | None = None,
        retention: Retention | None = None,
        model_change: Callable[[], object] | None = None,
    ) -> None:
        self.tree = tree
        self.embedder = embedder
        self.builder = builder
        self.store = store
        self.models = models
        self.access = access or TreeAccess()
        self.retention = retention or Retention()
        #: Run by a writer before it opens the state: moves the tree to ``embedder``'s model when
        #: it was built with another (``ingestor.tree.model_change``); a no-op otherwise.
        self.model_change = model_change
        #: While a change of embedding model copies the tree in steps between updates (the
        #: daemon): the rows marking the nodes an update writes or deletes, committed with its
        #: intent (:meth:`~ingestor.tree.model_change.ModelChange.marks`).
        self.copy_marks: Callable[[list[str], list[str]], Changes | None] | None = None
        self._told_summarizer = False

    # -- the state ---------------------------------------------------------------------------

    def open_state(self, *, recover: bool = False) -> TreeState | None:
        """Return the committed state (its vectors read from the store on demand), or None.

        Args:
            recover: finish or undo an interrupted update first (see :meth:`recover`); only the
                holder of the writer lock may, since another process's update in flight looks
                the same.
        """
        if recover and self.model_change is not None:
            self.model_change()
        state = load_state(self.models, self.tree, self.embedder)
        if state is not None:
            state.vectors.fetch = self.store.retrieve_vectors
            if recover:
                self.recover(state)
                self._tell_summarizer(state)
        return state

    def _tell_summarizer(self, state: TreeState) -> None:
        """Say once, to a writer, that the tree's summaries were written by another summariser
        than the settings' (``ADRAP_SUMMARY__BACKEND`` or its model changed)."""
        summaries = self.builder.summaries
        was, was_form = state.params.get(SUMMARIZER_PARAM), state.params.get(SUMMARY_FORM_PARAM)
        now, form = summaries.summarizer.id, summaries.form
        if self._told_summarizer or was is None or (was == now and was_form in (None, form)):
            return
        self._told_summarizer = True
        log.warning(
            "tree %r: its summaries were written by %r (%s); %r (%s) writes those regenerated "
            "from now on, and `adrap refresh --rewrite` rewrites the others now (with an LLM: "
            "every one paid)",
            self.tree,
            was,
            was_form,
            now,
            form,
        )

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

    def recover(self, state: TreeState) -> int:
        """Repair the store after an update interrupted by a crash; return the points repaired.

        The update's intent names every point it was writing and deleting. Committed: its
        deletes are redone. Not committed: the points it wrote are put back as the committed
        state has them (re-embedded if a point is gone), and points of nodes the state does not
        have are deleted. Either way the cost is the size of that update, not of the tree.
        A first build killed while writing its points is finished (:meth:`fill_store`).
        """
        if fill_pending(state):
            filled = self.fill_store(state)
            self.store.optimize()
            log.info("finished the store of tree %r's first build: %d points", self.tree, filled)
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
            self.store.upsert(state.payloads(batch), self.restored_vectors(state, batch))
        if doomed:
            self.store.delete(doomed)
        self.drop_intent(state)
        log.info(
            "recovered tree %r from an interrupted update: %d points restored, %d deleted",
            self.tree,
            len(restore),
            len(doomed),
        )
        return len(restore) + len(doomed)

    def restored_vectors(self, state: TreeState, ids: list[str]) -> NDArray[np.float32]:
        """The vectors of nodes an interrupted update was writing: a summary's embedded again
        from its committed text (the update may have rewritten it in place: same id, a new
        vector in the store that the committed text does not have), a leaf's as stored."""
        vecs = np.array(self.vectors_of(state, ids))  # a copy: the state's rows may be read-only
        rows = [k for k, i in enumerate(ids) if state.nodes[i].layer > 0]
        if rows:
            fresh = self.embedder.embed_documents([state.nodes[ids[k]].text for k in rows])
            for k, vec in zip(rows, fresh, strict=True):
                vecs[k] = vec
                state.vectors[ids[k]] = vec
        return vecs

    def vectors_of(self, state: TreeState, ids: list[str]) -> NDArray[np.float32]:
        """Return the vectors of nodes, embedding their texts again where the store lost them."""
        return vectors_of(state, ids, store=self.store, embedder=self.embedder)

    def guard(self, action: Callable[[], T], what: str) -> T:
        """Run a state-database ``action``, turning its failure into a TreeError with the fix.

        ``what`` completes "cannot ... the tree state in <dir>" (``"write to"``).
        """
        try:
            return action()
        except (OSError, ModelStoreError) as exc:
            raise TreeError(
                f"cannot {what} the tree state in {self.models.root}: {exc}; check free space "
                "and permissions of ADRAP_STATE_DIR, then run the command again"
            ) from exc

    # -- the crash-safe writes ---------------------------------------------------------------

    def record_intent(self, state: TreeState, upsert: list[str], delete: list[str]) -> None:
        """Record, before writing, the points an update upserts and deletes (see :meth:`recover`)."""
        also = self.copy_marks(upsert, delete) if self.copy_marks is not None else None
        self.guard(lambda: begin_intent(state, upsert, delete, also=also), "write to")

    def drop_intent(self, state: TreeState) -> None:
        """Drop the intent once the update it names is fully written."""
        self.guard(lambda: end_intent(state), "write to")

    def commit(self, state: TreeState, *, unstored: bool = False) -> None:
        """Make the points durable, then commit ``state`` atomically to the state database.

        ``unstored``: a first build's state, whose points are written after (:meth:`fill_store`).
        """
        try:
            self.store.flush()  # the points are durable before the state that references them
            commit_state(self.models, state, unstored=unstored)
            if state.rows is not None:
                changelog.prune(state.rows, self.retention)
        except (OSError, ModelStoreError) as exc:
            raise TreeError(
                f"cannot commit the tree state to {self.models.root}: {exc}; check free space and "
                "permissions of ADRAP_STATE_DIR, then run the command again"
            ) from exc

    def store_state(
        self, state: TreeState, progress: Progress | None = None, *, index: bool = True
    ) -> None:
        """Upsert every node, commit the state, delete points the state no longer has, then
        build the store's index (embedded: the HNSW graph, once, after the bulk write).

        ``index=False`` leaves the index to the caller: a build lets its state go first, so
        that the index build's memory does not come on top of the whole tree's. Unindexed
        points are found by a scan meanwhile; the commit needs them durable, not indexed.
        """
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        ids = list(state.nodes)
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))
            if progress is not None:
                progress("store", start + len(batch), len(ids))
        self.commit(state)
        self._delete_orphans(set(ids))
        if index:
            self.store.optimize()

    def fill_store(self, state: TreeState, progress: Progress | None = None) -> int:
        """Write the points of a first build committed before them (:func:`fill_pending`),
        from the state database and the vectors its checkpoint kept; return how many.

        A batch at a time: its nodes are read, upserted and let go, so this process holds a
        few batches of the tree while the engine takes the points (docs/scale.md); the next
        batches are read from the database on a thread while this one is upserted
        (:func:`~ingestor.pipeline.overlap.ahead`, two ahead at most). Idempotent
        (upserts by id), so a fill killed half-way is simply run again by :meth:`recover`;
        vectors the checkpoint lacks are read from the store, else embedded again. Then points
        of no node are deleted (an older build's), the fill is recorded as done and the
        checkpoint deleted. The index is the caller's.
        """
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        path, rows = checkpoint_path(self.models, self.tree), None
        try:
            rows = RowStore(path) if path.exists() else None
        except ModelStoreError as exc:  # its vectors are read from the store or embedded again
            log.warning("cannot read the build's checkpoint %s (%s); embedding instead", path, exc)
        kept = CheckpointVectors(rows) if rows is not None else None
        ids = state.nodes.keys_with_prefix("")  # the ids alone: no node is loaded here

        def batches() -> Iterator[tuple[int, list[NodePayload], NDArray[np.float32]]]:
            """Each batch's payloads and vectors, read on a thread ahead of the upserts."""
            for start in range(0, len(ids), UPSERT_BATCH):
                batch = ids[start : start + UPSERT_BATCH]
                state.nodes.prefetch(batch)
                got = kept.get(batch) if kept is not None else {}
                lost = [i for i in batch if i not in got]
                if lost:
                    got |= dict(zip(lost, self.vectors_of(state, lost), strict=True))
                vectors = np.stack([got[i] for i in batch]).astype(np.float32, copy=False)
                payloads = state.payloads(batch)
                state.nodes.shed()
                state.vectors.shed()
                yield start + len(batch), payloads, vectors

        try:
            with bulk_writes(self.store):  # the index is built once, after
                for done, payloads, vectors in ahead(batches(), what="store's next points"):
                    self.store.upsert(payloads, vectors)
                    if progress is not None:
                        progress("store", done, len(ids))
        finally:
            if rows is not None:
                rows.close()
        self.store.flush()  # the points are durable before the fill is recorded as done
        self._delete_orphans(set(ids))
        self.guard(lambda: end_fill(state), "write to")
        drop_checkpoint(self.models, self.tree)
        return len(ids)

    def _delete_orphans(self, known: set[str]) -> None:
        """Delete the tree's points of no node in ``known`` (a previous build's)."""
        orphans = [i for i in self.store.iter_ids(self.tree) if i not in known]
        if orphans:
            self.store.delete(orphans)
            log.info("deleted %d points no longer in tree %r", len(orphans), self.tree)

    def show_leaves(self, state: TreeState, ids: list[str]) -> None:
        """Make new leaves searchable before adRAP places them (file → searchable is the
        embedding, not the summaries over it): they are written without parents, under an intent,
        so a crash or a failed update before the commit deletes them again (:meth:`recover`)."""
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        self.record_intent(state, ids, [])
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))

    def store_access(self, state: TreeState, changed: set[str], *, ensure: bool = True) -> None:
        """Write the ``access`` field of the nodes ``changed`` (their classes alone changed), then
        commit: the intent is recorded first, so a crash between the two is repaired by
        :meth:`recover` re-storing those points as the committed state has them. ``ensure``:
        False while a change of embedding model copies the tree (the live store holds the old
        model's points: it exists, and the writer's model is not its own)."""
        if ensure:
            self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        ids = sorted(i for i in changed if i in state.nodes)
        self.record_intent(state, ids, [])
        self.store.set_access(by_access(state, ids))
        self.commit(state)
        self.drop_intent(state)

    def store_changes(self, state: TreeState, upserted: set[str], deleted: set[str]) -> None:
        """Upsert changed nodes, commit the state, then delete the points of removed nodes.

        The intent (which points are written and deleted) is recorded first, so that a crash at
        any step is repaired by :meth:`recover` from those ids alone.
        """
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        ids = sorted(i for i in upserted if i in state.nodes)
        gone = sorted(i for i in deleted if i not in state.nodes)
        self.record_intent(state, ids, gone)
        log.debug("update: intent recorded; upserting %d points", len(ids))
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))
        log.debug("update: upserted; committing the state")
        self.commit(state)
        log.debug(
            "update: committed generation %d; deleting %d points", state.generation, len(gone)
        )
        if gone:
            self.store.delete(gone)
        log.debug("update: deleted; dropping the intent")
        self.drop_intent(state)
        log.debug("update: done")


def by_access(state: TreeState, ids: list[str]) -> dict[tuple[str, ...], list[str]]:
    """Return ``ids`` grouped by their nodes' access classes (one payload write per group)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for node_id in ids:
        node = state.nodes[node_id]
        groups.setdefault(tuple(sorted(node.access)), []).append(node_id)
    return groups


def bulk_writes(store: NodeStore) -> AbstractContextManager[None]:
    """The store's bulk-write mode where it has one (embedded: no index build per upsert batch,
    see :meth:`~retriever.edge_shard.EdgeShardLifecycle.bulk_writes`); a server indexes by
    itself."""
    bulk = getattr(store, "bulk_writes", None)
    return bulk() if bulk is not None else nullcontext()
