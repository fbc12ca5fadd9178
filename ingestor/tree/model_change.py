"""Change a tree's embedding model and keep its summaries: embeddings are paid, not summaries.

A tree's state names the embedding model its vectors were made with (the manifest's
``embed_model`` and ``dim``). When a writer opens it with another model (``ADRAP_EMBED__MODEL``,
its endpoint or backend changed, then ``adrap watch`` restarted or any writing command run), the
tree is moved to the new model in place of being refused:

1. **copy**: every node's text (leaves and summaries) is embedded with the new model and written,
   with the same point id and payload (``embed_model`` aside), into a store *beside* the live one
   (:mod:`retriever.model_switch`: ``<store>.next`` for the embedded shard, the alias's next
   generation on a server), a batch at a time; after each batch the new store is flushed and the
   cursor (the last node written, as its copy key) is committed to the state database
   (namespace ``model_change``). A kill resumes from the cursor, never from zero. The live store
   and the state are not touched: queries keep reading the old model's points meanwhile. The
   nodes go in the order of their text (:func:`copy_order`), so the copies of one text come
   together and are embedded once.
2. **refit** (recorded as the plan's phase, so ``status`` shows it): the new store is indexed,
   and every layer's fitted models are fitted again around the clusters the layer has,
   from the new vectors, as after a library upgrade (:mod:`ingestor.cluster.model_refit`: a
   global UMAP with one component per group, each group's local UMAP with an online GMM whose
   components are the M-step of its clusters). No cluster changes, so no summary is written.
3. **switch**: one state transaction records the new model and the refitted models, marks the
   change as switching and clears any interrupted update's intent (the new store was written from
   the committed state, so there is nothing to replay); then the new store is made the live one
   in one step (folder swap / alias switch), the query embedder follows, and the change's rows
   and a first build's leftover checkpoint go. Killed after the commit, the next writer finishes
   the switch before anything else.

Steps 1 and 2 embed, index and refit in a thread whose priority is lowered by ``nice``
(``ADRAP_WATCH__WRITER_NICE``, as the update worker's; :mod:`ingestor.tree.background`):
questions answered meanwhile get the cores they need.

Setting the model back during a copy abandons it (the new store is deleted); setting a third
model restarts the copy for it.

Updates: a writing command runs the change where it opens the state
(``TreeContext.open_state``), before its update. The daemon's writer, when it can load the old
model (``stepwise``), runs the copy in steps between its updates (:meth:`ModelChange.step`):
updates embed with the old model into the live store meanwhile, and every node an update writes
or deletes is marked (:meth:`ModelChange.marks`, committed with the update's intent) and copied
again, or deleted, before the copy goes on; the last step indexes, refits and switches.

``adrap status``, ``/status``, ``/metrics`` and the dashboard show the change under way from
these rows (:mod:`ingestor.tree.model_progress`, read without the clustering libraries).

The one case where a summary may be paid: a group with a local model but too few members left
for a UMAP becomes one cluster (as a refit after a library upgrade does); its summary is
regenerated (logged with its tokens). A tree as built has none.
"""

from __future__ import annotations

import bisect
import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from ingestor.cluster.adaptive import LayerDelta
from ingestor.cluster.digest import vector_digest
from ingestor.cluster.model_refit import refit_global, refit_locals
from ingestor.tree import changelog
from ingestor.tree.adrap import TreeUpdater, UpdateStats
from ingestor.tree.background import Background
from ingestor.tree.build import TreeBuilder
from ingestor.tree.model_progress import (
    COPY,
    NS,
    REFIT,
    SWITCH,
    ChangePlan,
    pending_change,
    read_plan,
    stored_model,
)
from ingestor.tree.model_repair import repair_models
from ingestor.tree.params import Progress, no_progress
from ingestor.tree.persist import commit_state, drop_checkpoint, load_state, state_path
from ingestor.tree.rowmap import dumps, loads
from ingestor.tree.state import TreeState
from models_store import Changes, ModelStore, RowStore
from retriever import Embedder, NodeStore
from retriever.model_switch import NextStore, next_store_for

__all__ = ["BATCH", "NS", "ChangePlan", "ModelChange", "pending_change", "stored_model"]

log = logging.getLogger(__name__)

#: Nodes embedded and written per step (the cursor is committed after each): at most this, and
#: at least MIN_BATCH, a tree being copied in about STEPS steps (so a small tree's progress shows).
BATCH = 512
MIN_BATCH = 8
STEPS = 16
#: Row-key prefix (namespace :data:`NS`) of the nodes written or deleted by an update during a copy
#: in steps: copied again (or deleted) before the copy goes on.
DIRTY = "dirty:"


@dataclass
class _Steps:
    """A copy run in steps: its rows, plan, new store, copy keys (:func:`copy_order`) and where
    it is."""

    rows: RowStore
    plan: ChangePlan
    nxt: NodeStore
    ids: list[str]
    at: int
    size: int
    times: dict[str, float]


class ModelChange:
    """Moves a tree to ``embedder``'s model when its state was written with another one.

    Args:
        models: the state directory's model store (the state database lives there).
        tree: the tree's name.
        store: the live node store (possibly behind the daemon's lock: the switch takes it).
        embedder: the new model (the writer's).
        builder: the tree's builder: its clusterer's parameters, and the summaries of the rare
            clusters a refit changes.
        beside: where the new store is built (default: beside ``store``, see
            :func:`~retriever.model_switch.next_store_for`).
        on_switch: called once the store switched (the daemon's query embedder follows).
        queries: held while the store switches and ``on_switch`` runs (the daemon's query
            lock): no question is embedded with one model and searched in the other's store.
        batch: nodes per step (None: see :data:`BATCH`).

    Attributes:
        between: called after each step of the copy with the state, the new store and whether
            a node id is among those written so far (:func:`copied_through`): the
            pipeline's permission pass (:meth:`~ingestor.pipeline.Pipeline.reclass_during_copy`),
            so that a permission changed during a long copy is applied at once, to the live
            store and to the nodes already copied. None: nothing runs between steps.
    """

    def __init__(
        self,
        models: ModelStore,
        tree: str,
        store: NodeStore,
        embedder: Embedder,
        builder: TreeBuilder,
        *,
        beside: NextStore | None = None,
        on_switch: Callable[[], None] | None = None,
        queries: contextlib.AbstractContextManager[Any] | None = None,
        batch: int | None = None,
        progress: Progress = no_progress,
        nice: int = 0,
    ) -> None:
        self.models = models
        self.tree = tree
        self.store = store
        self.embedder = embedder
        self.builder = builder
        self._beside = beside
        self.on_switch = on_switch
        self.queries = queries
        self.batch = batch
        self.progress = progress
        self.nice = nice
        #: What the last run did: nodes embedded, seconds per step, summaries regenerated.
        self.report: dict[str, Any] = {}
        self.between: Callable[[TreeState, NodeStore, Callable[[str], bool]], None] | None = None
        #: The daemon's writer runs the copy in steps between its updates (:meth:`step`), with
        #: the old model for the updates meanwhile; False: :meth:`__call__` runs it all at once.
        self.stepwise = False
        self._steps: _Steps | None = None

    @property
    def beside(self) -> NextStore:
        if self._beside is None:
            self._beside = next_store_for(self.store, self.tree)
        return self._beside

    def due(self) -> bool:
        """Return whether the tree has a committed state of another model than ``embedder``'s,
        or a change under way (read-only: what a daemon asks before it starts one)."""
        found = stored_model(state_path(self.models, self.tree))
        if found is None:
            return False
        rows = RowStore.shared(state_path(self.models, self.tree), readonly=True)
        return found != (self.embedder.model_id, self.embedder.dim) or read_plan(rows) is not None

    def __call__(self) -> bool:
        """Finish, abandon, resume or start the change the state and the embedder call for;
        return whether the tree's model changed.

        Raises:
            StoreError, EmbeddingError, ModelStoreError: a step failed; run it again to resume.
        """
        path = state_path(self.models, self.tree)
        if not path.exists():
            return False
        rows = RowStore.shared(path)
        manifest = rows.manifest()
        if "tree_name" not in manifest:
            return False
        want = (self.embedder.model_id, self.embedder.dim)
        have = (str(manifest.get("embed_model")), int(manifest.get("dim") or 0))
        plan = read_plan(rows)
        changed = False
        if plan is not None and plan.phase == SWITCH:
            self._switch(rows, plan)  # committed before a kill: finish it first
            plan, changed = None, True
        if have == want:
            if plan is not None:
                self._abandon(rows, plan, f"the model is {want[0]!r} again")
            return changed
        if plan is not None and (plan.model, plan.dim) != want:
            self._abandon(rows, plan, f"the model is {want[0]!r} now")
            plan = None
        if self.stepwise:  # the daemon's writer copies in steps between its updates (step)
            return changed
        self._change(rows, plan, have[0])
        return True

    # -- in steps, between updates (the daemon) ----------------------------------------------------

    def marks(self, upsert: list[str], delete: list[str]) -> Changes | None:
        """The rows that mark the nodes an update writes or deletes as to be copied again, to
        be committed with the update's intent (so a kill never loses one); None when no copy
        runs in steps. Every one is marked, copied or not yet: a node the copy reaches later is
        copied twice, a new node the copy's list lacks is copied once."""
        if self._steps is None:
            return None
        ch = Changes()
        for node_id in (*upsert, *delete):
            ch.set(NS, DIRTY + node_id, b"")
        return ch

    def step(self, state: TreeState) -> bool:
        """Run one step of the change in the daemon's writer, between two updates; return
        whether more steps remain (False: none is due, or this one switched the store).

        ``state`` is the writer's committed state, of the old model: the nodes updates wrote or
        deleted since they were copied are copied again (or deleted) first, then the next batch
        of the copy's list. When both are done, the last step indexes, refits and switches as
        :meth:`__call__` does (updates wait for that step alone); the writer then opens the
        state again (the new model's).
        """
        if self._steps is None and not self.begin():
            return False
        st = self._steps
        assert st is not None
        with contextlib.closing(Background(self.nice)) as bg:
            dirty = [k[len(DIRTY) :] for k in st.rows.keys_prefix(NS, DIRTY, limit=st.size)]
            if dirty:
                self._copy_again(st, state, dirty, bg)
                return True
            if st.at < len(st.ids):
                batch = st.ids[st.at : st.at + st.size]
                done = st.at + len(batch)
                self._copy_batch(st.rows, state, st.nxt, batch, done, bg, st.times)
                st.at = done
                return True
            self._steps = None
            state.nodes.shed()  # the writer's state is opened again after the switch: only the
            state.vectors.shed()  # refit's copy is held meanwhile
            fresh = load_state(self.models, self.tree)  # every node copied: as the writer's
            assert fresh is not None
            self._finish(st.rows, st.plan, fresh, st.nxt, bg, st.times)
        return False

    @property
    def copying(self) -> bool:
        """Whether a copy in steps runs (:meth:`begin` started it, the switch not yet done)."""
        return self._steps is not None

    def begin(self) -> bool:
        """Start (or resume) a copy in steps when the committed state is of another model than
        the new one; return whether one runs. From here, :meth:`marks` marks what updates
        write: call it before the writer's first update (:meth:`__call__` first, to finish or
        abandon what an earlier run left)."""
        if self._steps is not None:
            return True
        path = state_path(self.models, self.tree)
        if not path.exists():
            return False
        rows = RowStore.shared(path)
        manifest = rows.manifest()
        have = (str(manifest.get("embed_model")), int(manifest.get("dim") or 0))
        if "tree_name" not in manifest or have == (self.embedder.model_id, self.embedder.dim):
            return False
        state = load_state(self.models, self.tree, layers=False)  # its node ids alone
        assert state is not None
        plan, ids, start = self._begin(rows, read_plan(rows), have[0], state)
        size = self._step_size(len(ids))
        nxt = self.beside.open(plan.dim, plan.model)
        times = {"start": float(start), "t0": time.perf_counter()}
        self._steps = _Steps(rows, plan, nxt, ids, start, size, times)
        return True

    # -- the steps -------------------------------------------------------------------------------

    def _change(self, rows: RowStore, plan: ChangePlan | None, old: str) -> None:
        state = load_state(self.models, self.tree)  # no embedder given: not refused
        assert state is not None  # the caller found its committed manifest
        t0 = time.perf_counter()
        plan, ids, start = self._begin(rows, plan, old, state)
        nxt = self.beside.open(plan.dim, plan.model)
        # Embedding, indexing and refitting yield the cores to the questions the live store
        # answers meanwhile (tree.background); commits and permission passes run here.
        with contextlib.closing(Background(self.nice)) as bg:
            times = {"start": start, "t0": t0}
            self._copy(rows, state, nxt, ids, start, bg, times)
            self._finish(rows, plan, state, nxt, bg, times)

    def _begin(
        self, rows: RowStore, plan: ChangePlan | None, old: str, state: TreeState
    ) -> tuple[ChangePlan, list[str], int]:
        """Record the change (a new plan) or read where it stopped; return the plan, the copy
        keys in order (:func:`copy_order`), and where in them the copy resumes."""
        model, dim = self.embedder.model_id, self.embedder.dim
        raw = rows.get(NS, "cursor") if plan is not None else None
        cursor = str(loads(raw)) if raw is not None else ""
        legacy = bool(cursor) and ":" not in cursor  # begun in id order by an older adrap
        ids = sorted(state.nodes.keys_with_prefix("")) if legacy else copy_order(state)
        if plan is None:
            self.beside.drop()  # one an earlier change left unrecorded
            plan = ChangePlan(old, model, dim, COPY, len(ids), time.time())
            self._write(rows, state, {"plan": dumps(asdict(plan))}, clear=True)
        start = bisect.bisect_right(ids, cursor) if cursor else 0
        log.info(
            "tree %r: changing the embedding model from %r to %r: embedding the text of its %d "
            "nodes again%s beside the live store (%s), summaries kept (no summary is paid); "
            "queries use %r until the switch%s",
            self.tree,
            old,
            model,
            len(ids),
            f" (resumed: {start} done)" if start else "",
            self.beside.where,
            old,
            "; updates go on meanwhile (with the old model, then copied)" if self.stepwise else "",
        )
        return plan, ids, start

    def _finish(
        self,
        rows: RowStore,
        plan: ChangePlan,
        state: TreeState,
        nxt: NodeStore,
        bg: Background,
        times: dict[str, float],
    ) -> None:
        """Every node copied: index the new store, refit the layers, commit, switch."""
        model, dim = plan.model, plan.dim
        copy_s = time.perf_counter() - times["t0"]
        plan = replace(plan, phase=REFIT)  # what status shows; a kill from here resumes here
        self._write(rows, state, {"plan": dumps(asdict(plan))})
        t_index = time.perf_counter()
        nxt.flush()
        bg.run(nxt.optimize)
        index_s = time.perf_counter() - t_index
        t_refit = time.perf_counter()
        state.embed_model, state.dim = model, dim
        state.vectors.fetch = nxt.retrieve_vectors
        refitted = bg.run(self._refit, state, nxt)
        regenerated = refitted.summaries_regenerated if refitted is not None else 0
        refit_s = time.perf_counter() - t_refit
        changelog.note(  # written by the commit below, with the new model
            state,
            "model",
            started_at=plan.started_at,
            stats=refitted,
            detail=f"embedding model {plan.old} -> {model}: every node's text embedded again, "
            f"{regenerated} summaries paid",
        )
        plan = replace(plan, phase=SWITCH)
        also = Changes()
        also.set(NS, "plan", dumps(asdict(plan)))
        also.remove(NS, "cursor")
        also.clear.add("intent")  # an interrupted update: the new store holds the committed tree
        nxt.flush()
        commit_state(self.models, state, also=also)
        log.debug("model change: committed the new model; switching the store")
        self._switch(rows, plan)
        nodes = len(state.nodes)
        self.report = {
            "nodes": nodes,
            "embedded": int(times.get("embedded", nodes - times["start"])),
            "embed_seconds": times.get("embed", 0.0),
            "copy_seconds": copy_s,
            "index_seconds": index_s,
            "refit_seconds": refit_s,
            "seconds": time.perf_counter() - times["t0"],
            "summaries_regenerated": regenerated,
        }

    def _copy(
        self,
        rows: RowStore,
        state: TreeState,
        nxt: NodeStore,
        ids: list[str],
        start: int,
        bg: Background,
        times: dict[str, float],
    ) -> None:
        """Embed and write ``ids[start:]`` into ``nxt`` (in ``bg``), committing the cursor after
        each batch, then running :attr:`between`."""
        step = self._step_size(len(ids))
        for at in range(start, len(ids), step):
            batch = ids[at : at + step]
            self._copy_batch(rows, state, nxt, batch, at + len(batch), bg, times)
            if self.between is not None:
                self.between(state, nxt, copied_through(state, batch[-1]))
            log.debug("model change: %d of %d nodes embedded", at + len(batch), len(ids))
            self.progress("re-embed", at + len(batch), len(ids))

    def _step_size(self, nodes: int) -> int:
        """Nodes a step of the copy embeds: :attr:`batch`, else about 1/:data:`STEPS` of the
        tree, within [:data:`MIN_BATCH`, :data:`BATCH`]."""
        return self.batch or max(MIN_BATCH, min(BATCH, nodes // STEPS))

    def _copy_batch(
        self,
        rows: RowStore,
        state: TreeState,
        nxt: NodeStore,
        batch: list[str],
        done: int,
        bg: Background,
        times: dict[str, float],
    ) -> None:
        """Embed ``batch``'s texts with the new model, write them into ``nxt`` (durable), then
        commit the cursor (the batch's last id) and ``done``. A node gone since the copy's list
        was made is skipped (its deletion marked it, see :meth:`marks`)."""
        ids = [node_of(k) for k in batch]
        state.nodes.prefetch(ids)
        nodes = [n for i in ids if (n := state.nodes.get(i)) is not None]
        self._embed_into(state, nxt, nodes, bg, times)
        self._write(rows, state, {"cursor": dumps(batch[-1]), "done": dumps(done)})
        state.nodes.shed()

    def _copy_again(self, st: _Steps, state: TreeState, dirty: list[str], bg: Background) -> None:
        """Copy again the nodes updates wrote since they were copied; delete those they deleted;
        then forget the marks (one commit: a kill before it copies them again)."""
        state.nodes.prefetch(dirty)
        nodes = [n for i in dirty if (n := state.nodes.get(i)) is not None]
        gone = [i for i in dirty if i not in state.nodes]
        self._embed_into(state, st.nxt, nodes, bg, st.times)
        if gone:
            st.nxt.delete(gone)
            st.nxt.flush()
        ch = Changes()
        for node_id in dirty:
            ch.remove(NS, DIRTY + node_id)
        st.rows.commit(ch, stamp=state.generation)
        state.nodes.shed()
        log.debug("model change: %d nodes updated meanwhile copied again", len(dirty))

    def _embed_into(
        self,
        state: TreeState,
        nxt: NodeStore,
        nodes: list[Any],
        bg: Background,
        times: dict[str, float],
    ) -> None:
        if not nodes:
            return
        t = time.perf_counter()
        vectors = bg.run(self.embedder.embed_documents, [n.text for n in nodes])
        times["embed"] = times.get("embed", 0.0) + time.perf_counter() - t
        times["embedded"] = times.get("embedded", 0.0) + len(nodes)
        payloads = [n.payload(state.tree, self.embedder.model_id) for n in nodes]
        bg.run(_write_batch, nxt, payloads, vectors)

    def _refit(self, state: TreeState, nxt: NodeStore) -> UpdateStats | None:
        """Fit every layer's models again from the new vectors around its clusters; return what
        regenerating the summaries of the clusters a refit had to change did (usually none
        changes: None)."""
        make = self.builder.summaries.make_clusterer
        deltas = repair_models(state, make)  # models the libraries cannot read: refitted first
        for i, al in enumerate(state.layers):
            delta = deltas.setdefault(i, LayerDelta())
            refit_global(al, _fresh(al.clusterer, make), state.matrix)
            groups = range(len(al.gmms))
            members = {g: al.groups.members_of(g) for g in groups}
            olds = {g: al.gmms[g] for g in groups if g not in al.guarded}
            refit_locals(al, members, state.matrix, delta, olds)
            if i > 0:  # each summary is placed from its own vector: the new model's now
                nodes = sorted(al.point_of)
                for node_id, vec in zip(nodes, state.matrix(nodes), strict=True):
                    al.placed[node_id] = vector_digest(vec)
            log.debug("model change: refitted layer %d (%d groups)", i, len(al.gmms))
        deltas = {i: d for i, d in deltas.items() if d.dirty or d.created or d.removed}
        if not deltas:
            return None
        stats = TreeUpdater(self.builder).regenerate(state, deltas)
        upserted = sorted(stats.upserted)
        for start in range(0, len(upserted), BATCH):
            batch = upserted[start : start + BATCH]
            nxt.upsert(state.payloads(batch), state.matrix(batch))
        if stats.deleted:
            nxt.delete(sorted(stats.deleted))
        log.info(
            "model change of tree %r: %d clusters had too few members left for a UMAP and "
            "became one; %d summaries regenerated for them (%d tokens)",
            self.tree,
            sum(len(d.dirty | d.created | d.removed) for d in deltas.values()),
            stats.summaries_regenerated,
            stats.summary_tokens,
        )
        return stats

    def _switch(self, rows: RowStore, plan: ChangePlan) -> None:
        """Make the new store live (idempotent), let queries follow, forget the change."""
        if self.beside.exists():
            self.beside.open(plan.dim, plan.model)
        with self.queries or contextlib.nullcontext():  # questions wait for both to switch
            self.beside.switch()
            if self.on_switch is not None:
                self.on_switch()
        ch = Changes()
        ch.clear.add(NS)
        rows.commit(ch)
        drop_checkpoint(self.models, self.tree)  # a first build's vectors: the old model's
        log.info(
            "tree %r now uses embedding model %r: its store switched (%.0f s after the change "
            "started); queries embed with it",
            self.tree,
            plan.model,
            time.time() - plan.started_at,
        )

    def _abandon(self, rows: RowStore, plan: ChangePlan, why: str) -> None:
        self.beside.drop()
        ch = Changes()
        ch.clear.add(NS)
        rows.commit(ch)
        log.info(
            "tree %r: abandoned the change of embedding model to %r (%s); its store is deleted",
            self.tree,
            plan.model,
            why,
        )

    def _write(
        self, rows: RowStore, state: TreeState, put: dict[str, bytes], *, clear: bool = False
    ) -> None:
        ch = Changes()
        if clear:
            ch.clear.add(NS)
        for key, value in put.items():
            ch.set(NS, key, value)
        rows.commit(ch, stamp=state.generation)


def _write_batch(nxt: NodeStore, payloads: list[Any], vectors: Any) -> None:
    nxt.upsert(payloads, vectors)
    nxt.flush()  # durable before the cursor says so


def _fresh(clusterer: Any, make: Callable[[], Any]) -> Any:
    """An unfitted clusterer with ``clusterer``'s parameters (``make()``'s when it cannot be
    read), for the global refit."""
    try:
        names = [p for p in inspect.signature(type(clusterer).__init__).parameters if p != "self"]
        params = {p: getattr(clusterer, p) for p in names}
        return type(clusterer)(**params)
    except (AttributeError, TypeError, ValueError):
        return make()


def copy_order(state: TreeState) -> list[str]:
    """The copy's keys in the order it embeds the nodes: ``<content hash>:<node id>``, so the
    copies of a text (a share's duplicate files, their summaries) come one after another and
    are embedded once (the embedder keeps the last 4,096 texts). In id order they were spread
    over the whole copy: a 26.5k-leaf tree's 8,055 distinct texts cost the time of ~10,400.
    Reads every node once, keeping none (a 1M-node tree's keys: ~100 MB)."""
    return sorted(f"{node.content_hash}:{node_id}" for node_id, node in state.nodes.scan())


def node_of(key: str) -> str:
    """The node id of a copy key (a cursor written by an older adrap: the node id alone)."""
    return key.rpartition(":")[2]


def copied_through(state: TreeState, cursor: str) -> Callable[[str], bool]:
    """Whether a node of ``state`` is among those the copy wrote, up to the copy key
    ``cursor`` (its text unchanged since: the state is the copy's)."""

    def copied(node_id: str) -> bool:
        if ":" not in cursor:  # a copy in id order
            return node_id <= cursor
        node = state.nodes.peek(node_id)
        return node is not None and f"{node.content_hash}:{node_id}" <= cursor

    return copied
