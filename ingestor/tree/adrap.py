"""adRAP: update a tree in place when leaves are added and removed [A §4, Algorithms 2 and 5].

A batch applies every insert and delete of a layer first, then regenerates each affected summary
once, then moves up: regenerated summaries take their predecessor's place in the layer above
(same point of the online GMM, new content-addressed node id), new clusters' summaries are
inserted there as new points, and summaries of removed clusters are deleted there, recursively.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ingestor.cluster.adaptive import AdaptiveLayer, LayerDelta
from ingestor.tree.build import BuildStats, TreeBuilder
from ingestor.tree.state import TreeState

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
    summaries_regenerated: int = 0
    summary_cache_hits: int = 0
    summary_tokens: int = 0
    upserted: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    seconds: float = 0.0


@dataclass
class _Pending:
    """Operations waiting for one layer."""

    add: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    replace: dict[str, str] = field(default_factory=dict)


class TreeUpdater:
    """Applies batches of leaf inserts/deletes to a tree state with adRAP."""

    def __init__(self, builder: TreeBuilder) -> None:
        self.builder = builder

    def apply(
        self,
        state: TreeState,
        new_leaves: list[str],
        removed_leaves: list[str],
    ) -> UpdateStats:
        """Update ``state``: ``new_leaves`` are already in ``state.nodes``/``vectors``;
        ``removed_leaves`` are still there and will be deleted.

        Returns:
            What changed; ``upserted``/``deleted`` are the node ids to write to/delete from the store.
        """
        t0 = time.perf_counter()
        stats = UpdateStats(leaves_added=len(new_leaves), leaves_removed=len(removed_leaves))
        stats.upserted |= set(new_leaves)
        pending = _Pending(add=list(new_leaves), remove=list(removed_leaves))
        layer = 0
        while pending.add or pending.remove or pending.replace:
            al: AdaptiveLayer | None = state.layers[layer] if layer < len(state.layers) else None
            pending = self._apply_layer(state, layer, al, pending, stats)
            layer += 1
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
    ) -> _Pending:
        delta = LayerDelta()
        touched: set[str] = set()  # nodes of this layer whose parents must be recomputed
        for node_id in todo.remove:
            if al is not None:
                touched.update(m for cid in al.clusters_of(node_id) for m in al.members(cid))
                al.remove(node_id, delta)
            self._delete_node(state, node_id, stats)
        for old, new in todo.replace.items():
            if al is not None:
                al.replace(old, new, delta)
            self._delete_node(state, old, stats)
        if al is None:  # the top layer: its nodes have no parents
            return _Pending()
        al.add_many(todo.add, state.matrix(todo.add), delta)

        stats.clusters_changed += len(delta.dirty - delta.created)
        stats.clusters_created += len(delta.created)
        stats.clusters_split += len(delta.split)
        stats.clusters_removed += len(delta.removed)
        # cluster_nodes still holds the summaries as they were before this batch.
        old_nodes = {
            cid: list(al.cluster_nodes.get(cid, []))
            for cid in delta.dirty | delta.created | delta.removed
        }
        for cid in delta.removed:
            al.cluster_nodes.pop(cid, None)

        # Regenerate each affected cluster once, from its new membership.
        members_of = {cid: al.members(cid) for cid in sorted(delta.dirty | delta.created)}
        for members in members_of.values():
            touched.update(members)
        build_stats = BuildStats()
        before = set(state.nodes)
        regenerated = self.builder.summarize_clusters(state, layer + 1, members_of, build_stats)
        al.cluster_nodes.update(regenerated)
        made = list(dict.fromkeys(n for ns in regenerated.values() for n in ns))
        stats.summaries_regenerated += build_stats.summary_calls
        stats.summary_cache_hits += build_stats.cache_hits
        stats.summary_tokens += build_stats.summary_tokens

        # Which summaries of the layer above are new, replaced or gone.
        referenced = {n for ns in al.cluster_nodes.values() for n in ns}
        nxt = _Pending()
        for cid in sorted(old_nodes):
            olds = [n for n in old_nodes[cid] if n not in referenced and n in state.nodes]
            news = [n for n in al.cluster_nodes.get(cid, []) if n not in before]
            if len(olds) == 1 and len(news) == 1 and olds[0] not in nxt.replace:
                nxt.replace[olds[0]] = news[0]
            else:
                nxt.remove.extend(o for o in olds if o not in nxt.remove)
                nxt.add.extend(n for n in news if n not in nxt.add)
        claimed = set(nxt.add) | set(nxt.replace.values())
        nxt.add.extend(n for n in made if n not in before and n not in claimed)
        stats.upserted.update(n for n in made if n not in before)

        # Recompute the parents of every node whose clusters changed.
        for node_id in touched:
            node = state.nodes.get(node_id)
            if node is None:
                continue
            parents = list(
                dict.fromkeys(
                    p
                    for cid in sorted(al.clusters_of(node_id))
                    for p in al.cluster_nodes.get(cid, [])
                    if p in state.nodes and node_id in state.nodes[p].children
                )
            )
            if parents != node.parents:
                node.parents = parents
                stats.upserted.add(node_id)
        return nxt

    def _delete_node(self, state: TreeState, node_id: str, stats: UpdateStats) -> None:
        node = state.nodes.pop(node_id, None)
        state.vectors.pop(node_id, None)
        if node is None:
            return
        stats.deleted.add(node_id)
        for child in node.children:
            c = state.nodes.get(child)
            if c is not None and node_id in c.parents:
                c.parents.remove(node_id)
                stats.upserted.add(child)
