"""Deferred summaries: an update that may not pay for its summaries marks them stale instead.

With an LLM, a tree's upkeep costs its summaries, and a folder that changes steadily changes the
same clusters again and again: regenerating a summary at every change buys it many times over.
An update with ``defer`` places its nodes as usual (UMAP transform, online GMM) and, for a changed
cluster whose summary can wait, brings the summary's ``children`` and ``sources`` up to date and
marks it stale (:attr:`~ingestor.tree.state.Node.stale`, registered in ``state.stale`` with the
time it went stale) instead of regenerating it: the old text and vector stay searchable, nothing
above it moves, and the nodes under it find it as their parent. A later
:meth:`~ingestor.tree.adrap.TreeUpdater.refresh` regenerates every stale summary once, bottom-up,
through the update's own machinery (:func:`stale_seeds`): a summary touched by ten changes inside
one window is bought once.

A cluster's summary can wait when the cluster existed before the batch, has exactly one summary
node, no other cluster names that node, and its members still fit the summariser's input limit.
Otherwise (a new cluster, a cluster cut for the input limit or sharing its node) it is regenerated
at once, as without ``defer``.
"""

from __future__ import annotations

import time

from ingestor.cluster.adaptive import AdaptiveLayer, LayerDelta
from ingestor.tree.state import Node, Provenance, TreeState

__all__ = [
    "can_wait",
    "forget_fresh",
    "give_members",
    "mark_stale",
    "members_tokens",
    "naming_clusters",
    "stale_seeds",
]


def naming_clusters(al: AdaptiveLayer, node: Node) -> set[int]:
    """The clusters of layer ``al`` whose summary is ``node`` (found through its children)."""
    return {
        c
        for child in node.children
        if child in al.point_of
        for c in al.clusters_of(child)
        if node.node_id in al.cluster_nodes.get(c, ())
    }


def can_wait(
    state: TreeState,
    al: AdaptiveLayer,
    cid: int,
    members: list[str],
    delta: LayerDelta,
    max_input_tokens: int | None,
) -> str | None:
    """Return the summary node of cluster ``cid`` if its regeneration can wait, else None."""
    if cid in delta.created:
        return None
    nodes = al.cluster_nodes.get(cid, [])
    if len(nodes) != 1:
        return None
    node = state.nodes.peek(nodes[0])
    if node is None or naming_clusters(al, node) - {cid}:
        return None
    if max_input_tokens is not None and members_tokens(state, members) > max_input_tokens:
        return None
    return node.node_id


def members_tokens(state: TreeState, members: list[str]) -> int:
    """Return the tokens of a cluster's ``members`` (those still in the tree)."""
    state.nodes.prefetch(members)
    return sum(n.n_tokens for m in members if (n := state.nodes.peek(m)) is not None)


def give_members(state: TreeState, node_id: str, members: list[str]) -> tuple[Node, bool]:
    """Give summary ``node_id`` its cluster's new ``members`` and their sources, keeping its text
    and vector; return the node (taken to change: written back at the commit) and whether its
    children changed."""
    node = state.nodes.edit(node_id)
    state.nodes.prefetch(members)
    kids = [k for m in members if (k := state.nodes.peek(m)) is not None]
    Provenance.merge(kids, state.max_node_sources).set_on(node)
    moved = node.children != list(members)
    node.children = list(members)
    return node, moved


def mark_stale(state: TreeState, node_id: str, members: list[str]) -> None:
    """Mark summary ``node_id`` stale, keeping its text and vector, and give it its cluster's
    new ``members`` and their sources (stale first: it keeps the access classes its text came
    from, :meth:`~ingestor.tree.state.Provenance.set_on`)."""
    node = state.nodes.edit(node_id)
    was_stale, node.stale = node.stale, True
    node, _ = give_members(state, node_id, members)
    node.updated_at = time.time()
    if not was_stale:
        state.stale[node_id] = node.updated_at


def stale_by_summarizer(state: TreeState, summarizer_id: str, *, every: bool = False) -> int:
    """Mark stale every summary written by another summariser than ``summarizer_id`` (``every``:
    every summary, its form changed) -- its text and vector kept until the next refresh writes
    it again; return how many. Reads every summary of the tree once."""
    marked = 0
    for layer in range(1, len(state.layers) + 1):
        ids = state.ids_in_layer(layer)
        state.nodes.prefetch(ids)
        for node_id in ids:
            node = state.nodes.peek(node_id)
            if node is None or node.stale or (node.summarizer == summarizer_id and not every):
                continue
            node = state.nodes.edit(node_id)
            node.stale, node.updated_at = True, time.time()
            state.stale[node_id] = node.updated_at
            marked += 1
    return marked


def stale_seeds(state: TreeState) -> dict[int, LayerDelta]:
    """Per clustered layer, the clusters whose summaries are stale, as an update's starting
    delta: an update seeded with them regenerates those summaries and moves what changed up."""
    seeds: dict[int, LayerDelta] = {}
    stale = list(state.stale)
    state.nodes.prefetch(stale)
    for node_id in stale:
        node = state.nodes.peek(node_id)
        if node is None or not node.stale or not 0 < node.layer <= len(state.layers):
            continue
        al = state.layers[node.layer - 1]
        al.prefetch(node.children)
        cids = naming_clusters(al, node)
        if cids:
            seeds.setdefault(node.layer - 1, LayerDelta()).dirty.update(cids)
    return seeds


def forget_fresh(state: TreeState) -> None:
    """Drop from ``state.stale`` the summaries that are gone or were regenerated since."""
    stale = list(state.stale)
    state.nodes.prefetch(stale)
    for node_id in stale:
        node = state.nodes.peek(node_id)
        if node is None or not node.stale:
            del state.stale[node_id]
