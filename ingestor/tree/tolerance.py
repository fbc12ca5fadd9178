"""Only what changed is re-read: a summary whose children changed a little keeps its text.

With an LLM, a tree's upkeep costs its summaries, and most of the summaries an update touches
change very little: a point joins a cluster only as a soft member near the threshold, or a cluster
of many children gains one. Two rules leave such a summary *within tolerance* (its text and
vector kept, its ``children`` and ``sources`` brought up to date, not stale):

* **soft margin** (``soft_margin``): a node that joins or leaves a cluster only as a soft member
  whose posterior is within this of the clusterer's threshold (not its most probable cluster)
  changes nothing of that cluster's summary;
* **minimum change** (``min_change``): each summary keeps its *drift*
  (:attr:`~ingestor.tree.state.Node.drift`): the tokens its children gained, lost or had
  rewritten since its text was written (a child rewritten in place counts the tokens its text
  gained and lost). While the drift stays below ``min_change`` of its children's tokens the
  summary keeps its text; once it reaches it, the summary is regenerated (or marked stale, with
  ``defer``) and its drift starts again from 0. Ten small changes add up.

Within tolerance is not stale: the summary describes its children as they were when it was
written, short of less than ``min_change`` of their text; ``adrap refresh`` leaves it as it is.

Removals are never tolerated: a removed document's text must not survive in the summaries over
it. A summary that loses a child deleted from the tree, or whose child was regenerated for that
reason, gets an infinite drift and is regenerated (or stays stale until the refresh), and so is
every summary above it that read its old text (the *purged* nodes handed up a layer).

With both rules at 0, every change regenerates, as adRAP does [A §4].
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.adaptive import GUARDED, AdaptiveLayer, LayerDelta
from ingestor.cluster.gmm import responsibilities
from ingestor.cluster.online_gmm import OnlineGMM
from ingestor.tree.deferral import can_wait, give_members, members_tokens
from ingestor.tree.state import Node, TreeState

__all__ = ["FloorRules", "Settled", "hard_cluster", "posterior"]


def posterior(al: AdaptiveLayer, node_id: str, cid: int) -> tuple[float, bool]:
    """Return the posterior of node ``node_id`` for cluster ``cid`` in its group's mixture, and
    whether ``cid`` is its hard cluster (the most probable of the clusters it belongs to).

    A node of a guarded group (one cluster) has posterior 1 for it; a node whose group does not
    hold ``cid`` has posterior 0.
    """
    g, pid = al.point_of[node_id]
    gmm = al.gmms[g]
    if pid == GUARDED or gmm is None:
        return (1.0, True) if al.guarded[g][0] == cid else (0.0, False)
    if cid not in gmm.cluster_ids:
        return 0.0, False
    post = _posteriors(gmm, pid)
    mine = [gmm.cluster_ids.index(c) for c in gmm.memberships(pid)]
    hard = max(mine, key=lambda j: post[j]) if mine else int(np.argmax(post))
    j = gmm.cluster_ids.index(cid)
    return float(post[j]), hard == j


def hard_cluster(al: AdaptiveLayer, node_id: str) -> int:
    """Return the cluster node ``node_id`` belongs to most (its most probable membership)."""
    g, pid = al.point_of[node_id]
    gmm = al.gmms[g]
    if pid == GUARDED or gmm is None:
        return al.guarded[g][0]
    post = _posteriors(gmm, pid)
    return max(gmm.memberships(pid), key=lambda c: post[gmm.cluster_ids.index(c)])


def _posteriors(gmm: OnlineGMM, pid: int) -> NDArray[np.float64]:
    x = gmm.buffer.view()[gmm.buffer.row[pid]]
    post: NDArray[np.float64] = responsibilities(x[None, :], gmm.params)[1][0]
    return post


@dataclass
class Settled:
    """What the rules decided for a layer's changed clusters.

    Attributes:
        tolerated: cluster id → its summary node, kept within tolerance (not regenerated).
        purging: summary nodes that must be regenerated because their text may hold a removed
            node's (infinite drift); once rewritten they are purged nodes of the layer above.
        waitable: cluster id → :func:`~ingestor.tree.deferral.can_wait`'s answer for it (the
            summary node whose regeneration can wait, or None), for every changed cluster.
    """

    tolerated: dict[int, str] = field(default_factory=dict)
    purging: set[str] = field(default_factory=set)
    waitable: dict[int, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class FloorRules:
    """The rules of this module (:class:`~ingestor.tree.params.TreeParams`' ``min_change`` and
    ``soft_margin``; both 0: every change regenerates)."""

    min_change: float = 0.0
    soft_margin: float = 0.0

    def settle(
        self,
        state: TreeState,
        al: AdaptiveLayer,
        delta: LayerDelta,
        members_of: dict[int, list[str]],
        rewritten: dict[str, int],
        purged: set[str],
        max_input_tokens: int | None,
    ) -> Settled:
        """Add each changed cluster's change to its summary's drift; keep within tolerance those
        whose drift is small (their children and sources made current).

        Args:
            members_of: the changed clusters' members now.
            rewritten: nodes of this layer rewritten in place below → tokens their text gained
                and lost (placed again by this batch).
            purged: nodes of this layer gone from the tree or rewritten to drop a removed
                node's text: a summary that read them is regenerated.
            max_input_tokens: the summariser's input limit (a cluster past it is cut: never kept).
        """
        out = Settled()
        for cid, members in members_of.items():
            node_id = out.waitable[cid] = can_wait(state, al, cid, members, delta, max_input_tokens)
            node = state.nodes.peek(node_id) if node_id is not None else None
            if node is None:  # new, cut or shared: regenerated (a purge, if it read a purged)
                old = {c for n in al.cluster_nodes.get(cid, []) for c in _children(state, n)}
                if old & purged:
                    out.purging.update(al.cluster_nodes.get(cid, []))
                continue
            change = self._change(state, al, cid, node, members, rewritten, purged)
            if change:
                node = state.nodes.edit(node.node_id)
                node.drift += change
            if math.isinf(node.drift):
                out.purging.add(node.node_id)
            elif not node.stale and (
                not change or node.drift < self.min_change * members_tokens(state, members)
            ):
                node, moved = give_members(state, node.node_id, members)
                if moved:
                    node.updated_at = time.time()
                out.tolerated[cid] = node.node_id
        return out

    def _change(
        self,
        state: TreeState,
        al: AdaptiveLayer,
        cid: int,
        node: Node,
        members: list[str],
        rewritten: dict[str, int],
        purged: set[str],
    ) -> float:
        """The tokens of ``node``'s text its cluster's change touches (inf: a purge)."""
        before, now = set(node.children), set(members)
        if before & purged:
            return math.inf
        state.nodes.prefetch(now | before)
        al.prefetch(now | before)
        change = 0.0
        for c in sorted((now ^ before) | (now & before & rewritten.keys())):
            child = state.nodes.peek(c)
            if child is None:
                return math.inf  # gone from the tree without being listed: never kept
            if c in al.point_of and self._marginal(al, c, cid):
                continue
            tokens = (
                rewritten.get(c, child.n_tokens) if c in before and c in now else child.n_tokens
            )
            change += max(1, tokens)  # a change that counts is never nothing
        return change

    def _marginal(self, al: AdaptiveLayer, node_id: str, cid: int) -> bool:
        """Whether ``node_id`` is (or would be) a soft member of ``cid`` near the threshold."""
        if self.soft_margin <= 0:
            return False
        p, hard = posterior(al, node_id, cid)
        return not hard and abs(p - float(al.clusterer.threshold)) <= self.soft_margin


def _children(state: TreeState, node_id: str) -> list[str]:
    node = state.nodes.peek(node_id)
    return node.children if node is not None else []
