"""adRAP: update a tree in place when leaves are added and removed [A §4, Algorithms 2 and 5].

A batch applies every insert and delete of a layer first, then regenerates each affected summary
once, then moves up. A regenerated summary keeps its cluster's node id (a new cluster's summary is
a new node, content-addressed by its children), so the nodes under it and over it keep their
links and an update writes what it regenerated, not every child of it. A regenerated summary
re-enters the layer above at its new embedding, through the UMAP transform and the online GMM
(removed, then placed again), like a new cluster's summary [A §4]; the summaries no cluster names
any more are deleted there, recursively. Two clusters with the same members share one summary
node; the lists handed to the layer above (new nodes, moved nodes, gone nodes) are disjoint by
construction, however clusters share. A summary regenerated because a child changed, whose text
comes out the same (same children), keeps its vector and its place above: nothing over it is
regenerated for it, only the sources of its ancestors are brought up to date. Last, Algorithm 1's
condition is re-checked at the top (``TreeBuilder.settle_top``): a layer is added over a top that
outgrew ``min_top_nodes``, and a redundant top layer is dropped.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from ingestor.cluster.adaptive import AdaptiveLayer, LayerDelta
from ingestor.cluster.threads import one_thread
from ingestor.tree.build import BuildStats, Regeneration, TreeBuilder
from ingestor.tree.deferral import (
    forget_fresh,
    mark_stale,
    naming_clusters,
    stale_seeds,
)
from ingestor.tree.drift import note_changes
from ingestor.tree.model_repair import repair_models
from ingestor.tree.state import Provenance, TreeState
from ingestor.tree.tolerance import FloorRules

log = logging.getLogger(__name__)


@dataclass
class UpdateStats:
    """What an update changed and cost."""

    leaves_added: int = 0
    leaves_removed: int = 0
    clusters_changed: int = 0
    clusters_created: int = 0
    clusters_split: int = 0
    clusters_removed: int = 0
    layers_added: int = 0
    layers_dropped: int = 0
    summaries_regenerated: int = 0
    summaries_unchanged: int = 0  # regenerated with the same text: nothing above moved for them
    summaries_deferred: int = 0  # marked stale instead of regenerated (``defer``)
    summaries_tolerated: int = 0  # kept: their children changed little (``tree.tolerance``)
    summary_cache_hits: int = 0
    summary_tokens: int = 0
    summary_input_tokens: int = 0  # the children's tokens of the summaries paid for
    upserted: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    seconds: float = 0.0


@dataclass
class _Pending:
    """Operations waiting for one layer: new nodes to place, rewritten nodes to place again
    (same id, new text and embedding; ``changed``: the tokens their text gained and lost), gone
    nodes to remove; ``purged``: rewritten nodes that dropped a removed node's text."""

    add: list[str] = field(default_factory=list)
    move: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    changed: dict[str, int] = field(default_factory=dict)
    purged: set[str] = field(default_factory=set)


@dataclass
class _ClustersBefore:
    """The changed clusters of a layer as the batch found them: their summary nodes (which
    ``cluster_nodes`` still holds until they are regenerated) and those summaries' children
    (the clusters' members before the batch)."""

    nodes: dict[int, list[str]]
    members: dict[int, set[str]]

    @classmethod
    def of(cls, state: TreeState, al: AdaptiveLayer, delta: LayerDelta) -> _ClustersBefore:
        changed = delta.dirty | delta.created | delta.removed
        nodes = {cid: list(al.cluster_nodes.get(cid, [])) for cid in changed}
        state.nodes.prefetch({n for ns in nodes.values() for n in ns})
        members = {
            cid: {c for n in ns if (node := state.nodes.peek(n)) is not None for c in node.children}
            for cid, ns in nodes.items()
        }
        return cls(nodes, members)

    @property
    def old_nodes(self) -> set[str]:
        return {n for ns in self.nodes.values() for n in ns}

    def touched(
        self, al: AdaptiveLayer, members_of: dict[int, list[str]], todo: _Pending
    ) -> set[str]:
        """The nodes whose parents may differ now: those placed by the batch, those that joined
        or left a changed cluster, and every member of a cluster whose summary nodes are not
        the ones it had. A member that stayed in a cluster whose summary was rewritten in place
        keeps its parents: reading every member of every changed cluster cost ~6x more rows at
        200k leaves (layer-1 clusters of ~34 leaves) than at 2k (~6), for no change."""
        out = set(todo.add) | set(todo.move)
        for cid, before in self.members.items():
            now = set(members_of.get(cid, ()))
            if al.cluster_nodes.get(cid, []) != self.nodes[cid]:
                out |= now | before
            else:
                out |= now ^ before
        return out - set(todo.remove)


class TreeUpdater:
    """Applies batches of leaf inserts/deletes to a tree state with adRAP."""

    def __init__(self, builder: TreeBuilder) -> None:
        self.builder = builder

    def apply(
        self,
        state: TreeState,
        new_leaves: list[str],
        removed_leaves: list[str],
        *,
        defer: bool = False,
    ) -> UpdateStats:
        """Update ``state``: ``new_leaves`` are already in ``state.nodes``/``vectors``;
        ``removed_leaves`` are still there and will be deleted.

        Args:
            defer: mark the summaries of changed clusters stale instead of regenerating those
                that can wait (:mod:`ingestor.tree.deferral`); :meth:`refresh` pays for them.

        Returns:
            What changed; ``upserted``/``deleted`` are the node ids to write to/delete from the store.
        """
        with one_thread("blas"):  # small matrices: a second BLAS thread only spins (threads.py)
            return self._apply(state, new_leaves, removed_leaves, defer=defer)

    def refresh(self, state: TreeState) -> UpdateStats:
        """Regenerate every stale summary once, bottom-up, and what that moves above them."""
        with one_thread("blas"):
            return self._apply(state, [], [], seeds=stale_seeds(state))

    def regenerate(self, state: TreeState, deltas: dict[int, LayerDelta]) -> UpdateStats:
        """Regenerate the summaries of the clusters ``deltas`` changed (per layer: a refit of
        its models had to change them, ``tree.model_change``) and what that moves above."""
        with one_thread("blas"):
            return self._apply(state, [], [], changed=deltas)

    def _apply(
        self,
        state: TreeState,
        new_leaves: list[str],
        removed_leaves: list[str],
        *,
        defer: bool = False,
        seeds: dict[int, LayerDelta] | None = None,
        changed: dict[int, LayerDelta] | None = None,
    ) -> UpdateStats:
        t0 = time.perf_counter()
        stats = UpdateStats(leaves_added=len(new_leaves), leaves_removed=len(removed_leaves))
        stats.upserted |= set(new_leaves)
        pending = _Pending(add=list(new_leaves), remove=list(removed_leaves))
        # Models the installed libraries cannot read are fitted again first; the clusters a
        # refit had to change (rarely any) are regenerated with this batch's, as are the
        # clusters a refresh was seeded with (stale summaries).
        start = repair_models(state, self.builder.summaries.make_clusterer)
        start.update(changed or {})
        for i, seed in (seeds or {}).items():
            start.setdefault(i, LayerDelta()).absorb(seed.dirty, (), (), ())
        refreshed: set[str] = set()
        layer = 0
        while pending.add or pending.move or pending.remove or start:
            al: AdaptiveLayer | None = state.layers[layer] if layer < len(state.layers) else None
            delta = start.pop(layer, None) or LayerDelta()
            pending = self._apply_layer(state, layer, al, pending, stats, refreshed, delta, defer)
            layer += 1
        self.refresh_provenance(state, refreshed, stats)
        depth = len(state.layers)
        build_stats = BuildStats()
        upserted, deleted = self.builder.settle_top(state, build_stats)
        stats.layers_added = max(0, len(state.layers) - depth)
        stats.layers_dropped = max(0, depth - len(state.layers))
        stats.upserted |= upserted
        stats.deleted |= deleted
        self._count_summaries(stats, build_stats)
        if state.stale:
            forget_fresh(state)
        state.added_since_build += len(new_leaves)
        state.removed_since_build += len(removed_leaves)
        stats.upserted -= stats.deleted
        stats.seconds = time.perf_counter() - t0
        return stats

    def _apply_layer(
        self,
        state: TreeState,
        layer: int,
        al: AdaptiveLayer | None,
        todo: _Pending,
        stats: UpdateStats,
        refreshed: set[str],
        delta: LayerDelta,
        defer: bool = False,
    ) -> _Pending:
        """Apply ``todo`` to layer ``layer``; ``delta`` already holds clusters changed before
        (by a refit of models that could not be read)."""
        if al is None:  # the top layer: its nodes have no parents
            for node_id in todo.remove:
                self._delete_node(state, node_id, stats)
            return _Pending()
        al.refit_share = self.builder.summaries.params.refit_share  # the running setting
        # Removes first, as a delete then an insert [A §4.4]. Adding first was measured worse: a
        # renamed document's leaves (or a summary's successor, close to it) then sit beside
        # their predecessors during the online GMM's refits, and BIC cuts tight clusters around
        # the near-duplicates (soak, 320 ops: 117 layer-1 clusters vs 97, rebuild 56).
        al.prefetch(todo.remove + todo.move)
        gone = Counter(al.point_of[n][0] for n in todo.remove if layer == 0 and n in al.point_of)
        for node_id in todo.remove:
            al.remove(node_id, delta)
        for node_id in todo.move:
            al.remove(node_id, delta, moving=True)
        for node_id in todo.remove:
            self._delete_node(state, node_id, stats)
        placing = todo.add + todo.move
        al.add_many(placing, state.matrix(placing), delta, vectors=state.matrix)
        if layer == 0:  # each subtree's drift (tree.drift): a cost of the batch
            note_changes(state, Counter(al.point_of[n][0] for n in todo.add), gone)
        stats.clusters_changed += len(delta.dirty - delta.created)
        stats.clusters_created += len(delta.created)
        stats.clusters_split += len(delta.split)
        stats.clusters_removed += len(delta.removed)

        before = _ClustersBefore.of(state, al, delta)
        for cid in delta.removed:
            al.cluster_nodes.pop(cid, None)
        al.groups.forget(delta.removed)
        members_of, regen, purging = self._regenerate(state, layer, al, delta, todo, stats, defer)
        refreshed |= regen.refreshed
        self._relink(state, al, before.touched(al, members_of, todo), stats)
        return _Pending(  # the layer above: made now, rewritten (placed again), named no more
            add=[n for n in regen.made if n in regen.created],
            move=[n for n in regen.made if n in regen.rewritten],
            remove=sorted(
                n
                for n in before.old_nodes
                if (node := state.nodes.peek(n)) is not None and not al.names(n, node.children)
            ),
            changed=regen.text_change,
            purged=purging & regen.rewritten,
        )

    def _regenerate(
        self,
        state: TreeState,
        layer: int,
        al: AdaptiveLayer,
        delta: LayerDelta,
        todo: _Pending,
        stats: UpdateStats,
        defer: bool,
    ) -> tuple[dict[int, list[str]], Regeneration, set[str]]:
        """Regenerate each changed or new cluster's summary once, from its new membership, into
        ``layer + 1``, but those whose change is small (:mod:`ingestor.tree.tolerance`; with
        ``defer``, mark those that can wait stale instead); return the clusters' members, what
        the regeneration did and the summaries regenerated to purge a removed node's text."""
        members_of = {cid: al.members(cid) for cid in sorted(delta.dirty | delta.created)}
        p = self.builder.summaries.params
        limit = p.max_input_tokens
        purged = todo.purged | set(todo.remove)
        settled = FloorRules(p.min_change, p.soft_margin).settle(
            state, al, delta, members_of, todo.changed, purged, limit
        )
        now, deferred = {c: m for c, m in members_of.items() if c not in settled.tolerated}, set()
        if defer:
            for cid, members in list(now.items()):
                node_id = settled.waitable[cid]  # settling changed no cluster still here
                if node_id is not None:
                    mark_stale(state, node_id, members)
                    deferred.add(node_id)
                    del now[cid]
        build_stats = BuildStats()
        regen = Regeneration(reuse=self._reusable(state, al, delta, now), changed=set(todo.move))
        regenerated = self.builder.summaries.summarize_clusters(
            state, layer + 1, now, build_stats, regen=regen
        )
        al.cluster_nodes.update(regenerated)
        regen.made = list(dict.fromkeys(n for ns in regenerated.values() for n in ns))
        self._count_summaries(stats, build_stats)
        stats.upserted |= regen.created | regen.rewritten | regen.relinked | regen.refreshed
        stats.summaries_unchanged += len(regen.refreshed)
        stats.summaries_deferred += len(deferred)
        stats.summaries_tolerated += len(set(settled.tolerated.values()))
        kept = deferred | set(settled.tolerated.values())
        stats.upserted |= kept
        regen.refreshed |= kept  # stay where they are above; the sources above them follow
        return members_of, regen, settled.purging

    @staticmethod
    def _relink(
        state: TreeState, al: AdaptiveLayer, node_ids: set[str], stats: UpdateStats
    ) -> None:
        """Set each node's parents to its clusters' summaries (written back only if changed)."""
        state.nodes.prefetch(node_ids)
        al.prefetch(node_ids)
        for node_id in node_ids:
            node = state.nodes.peek(node_id)
            if node is None:
                continue
            parents = list(
                dict.fromkeys(
                    p
                    for cid in sorted(al.clusters_of(node_id))
                    for p in al.cluster_nodes.get(cid, [])
                    if (parent := state.nodes.peek(p)) is not None and node_id in parent.children
                )
            )
            if parents != node.parents:
                state.nodes.edit(node_id).parents = parents
                stats.upserted.add(node_id)

    @staticmethod
    def _reusable(
        state: TreeState, al: AdaptiveLayer, delta: LayerDelta, members_of: dict[int, list[str]]
    ) -> dict[int, list[str]]:
        """Per regenerated cluster, its previous summary nodes that it may rewrite in place.

        A node is free when every cluster naming it is regenerated now: a cluster left as it
        was still needs the node as it is (two clusters with the same members share one).
        """
        changed = delta.dirty | delta.created | delta.removed
        out: dict[int, list[str]] = {}
        olds = [n for cid in members_of for n in al.cluster_nodes.get(cid, [])]
        state.nodes.prefetch(olds)
        al.prefetch(
            c for n in olds if (node := state.nodes.peek(n)) is not None for c in node.children
        )
        for cid in members_of:
            free = []
            for n in al.cluster_nodes.get(cid, []):
                node = state.nodes.peek(n)
                if node is not None and naming_clusters(al, node) <= changed:
                    free.append(n)
            out[cid] = free
        return out

    @staticmethod
    def refresh_provenance(state: TreeState, start: set[str], stats: UpdateStats) -> None:
        """Bring the ancestors' sources up to date above summaries whose text came out the same.

        Such a summary stays where it is in the layer above and its parents are not regenerated
        for it, but a document added or removed under it changed its sources, and a summary's
        sources are the union of its children's (docs/architecture.md, Invariants), capped past
        the tree's limit. Cost: the ancestors whose sources change, each the union of its
        children's: bounded by the limit, since an ancestor that is already capped stays capped
        and stops the walk.
        """
        todo = sorted(start)
        while todo:
            node = state.nodes.peek(todo.pop())
            if node is None:
                continue
            for p in node.parents:
                parent = state.nodes.peek(p)
                if parent is None:
                    continue
                state.nodes.prefetch(parent.children)
                kids = [k for c in parent.children if (k := state.nodes.peek(c)) is not None]
                prov = Provenance.merge(kids, state.max_node_sources)
                if prov != Provenance.of(parent):
                    prov.set_on(state.nodes.edit(p))
                    stats.upserted.add(p)
                    todo.append(p)

    @staticmethod
    def _count_summaries(stats: UpdateStats, build_stats: BuildStats) -> None:
        stats.summaries_regenerated += build_stats.summary_calls
        stats.summary_cache_hits += build_stats.cache_hits
        stats.summary_tokens += build_stats.summary_tokens
        stats.summary_input_tokens += build_stats.summary_input_tokens

    def _delete_node(self, state: TreeState, node_id: str, stats: UpdateStats) -> None:
        node = state.nodes.pop(node_id, None)
        state.vectors.pop(node_id, None)
        if node is None:
            return
        stats.deleted.add(node_id)
        for child in node.children:
            c = state.nodes.peek(child)
            if c is not None and node_id in c.parents:
                state.nodes.edit(child).parents.remove(node_id)
                stats.upserted.add(child)
