"""The floor of a one-document change: the summaries any correct update must regenerate (issue 34).

A document added, removed or edited changes the hard memberships of its leaves (each leaf's most
probable cluster) and nothing else has to change: the summaries of those clusters, and up the
ancestors the summary each of them belongs to most, are the minimum set an update must
regenerate. Their input tokens (each summary's children's tokens) are what an update must read.
"""

from __future__ import annotations

from collections.abc import Iterable

from ingestor.tree.state import TreeState
from ingestor.tree.tolerance import hard_cluster


def floor(state: TreeState, leaves: Iterable[str], gone: Iterable[str] = ()) -> dict[str, int]:
    """Return the floor of a change of ``leaves`` (node ids of layer 0 in ``state``): summary node
    → its input tokens, without the nodes in ``gone`` (leaves the change removes)."""
    skip = set(gone)
    out: dict[str, int] = {}
    frontier = set(leaves)
    for al in state.layers:
        al.prefetch(frontier)
        above: set[str] = set()
        for node_id in sorted(frontier):
            if node_id in al.point_of:
                above.update(al.cluster_nodes.get(hard_cluster(al, node_id), []))
        state.nodes.prefetch(above)
        for n in above:
            node = state.nodes.peek(n)
            if node is None:
                continue
            state.nodes.prefetch(node.children)
            out.setdefault(
                n,
                sum(
                    k.n_tokens
                    for c in node.children
                    if c not in skip and (k := state.nodes.peek(c)) is not None
                ),
            )
        frontier = above
    return out
