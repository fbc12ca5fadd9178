"""The online clustering of one tree layer: adRAP's placement of new nodes [A §4.2-4.4].

An :class:`AdaptiveLayer` wraps the fitted two-step clusterer of a layer. A new node goes through
the stored global UMAP ``transform`` to its most probable global cluster, through that cluster's
local UMAP ``transform`` into its :class:`~ingestor.cluster.online_gmm.OnlineGMM` (Algorithm 2), and the
layer reports which clusters changed, were created or were removed, so only their summaries are
regenerated. Each cluster id maps to the summary node(s) of the layer above (more than one when a
cluster had to be cut to fit the summariser's input limit).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.online_gmm import IdCounter, OnlineGMM

GUARDED = -1  # point id of a node in a global cluster too small for a local UMAP + GMM


@dataclass
class LayerDelta:
    """Cluster ids touched by a batch of operations on one layer."""

    dirty: set[int] = field(default_factory=set)
    created: set[int] = field(default_factory=set)
    split: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)

    def absorb(
        self,
        dirty: Iterable[int],
        created: Iterable[int],
        split: Iterable[int],
        removed: Iterable[int],
    ) -> None:
        """Merge one operation's result into the batch's delta, in operation order."""
        dirty, created, removed = set(dirty), set(created), set(removed)
        # A cluster emptied earlier in the batch and populated again (a guarded group keeps its
        # id) exists at the end: it must be regenerated, not removed.
        revived = (dirty | created) & self.removed
        self.removed -= revived
        self.dirty |= revived
        self.created |= created - revived
        self.removed |= removed
        self.created -= self.removed
        self.dirty |= dirty
        self.dirty -= self.removed
        self.split |= set(split)


@dataclass
class AdaptiveLayer:
    """Online clustering of layer ``layer``'s nodes into the summaries of layer ``layer + 1``.

    Attributes:
        clusterer: the fitted ``TreeClusterer`` (global UMAP + GMM, local UMAPs).
        gmms: per global cluster, its online local GMM (None: a guarded, single-cluster group).
        guarded: per guarded global cluster, its one cluster id and member node ids.
        point_of: node id → (global cluster, point id in its OnlineGMM or GUARDED).
        node_at: (global cluster, point id) → node id.
        cluster_nodes: cluster id → summary node ids of the layer above.
        greedy: the paper's greedy baseline: join the most probable cluster, no GMM update.
    """

    layer: int
    clusterer: Any
    gmms: list[OnlineGMM | None]
    guarded: dict[int, tuple[int, set[str]]]
    point_of: dict[str, tuple[int, int]]
    node_at: dict[tuple[int, int], str]
    cluster_nodes: dict[int, list[str]]
    greedy: bool = False

    @classmethod
    def from_fit(
        cls,
        layer: int,
        clusterer: Any,
        member_ids: list[str],
        cluster_nodes: dict[int, list[str]],
        *,
        tau_n: int | None = None,
        tau_c: int = 11,
        greedy: bool = False,
    ) -> AdaptiveLayer:
        """Wrap a freshly fitted clusterer; ``cluster_nodes`` maps its final cluster ids to nodes."""
        n = len(member_ids)
        tau = tau_n if tau_n is not None else max(100, math.isqrt(n))
        ids = IdCounter(next_id=int(clusterer.n_clusters_))
        fids_of_row: dict[int, set[int]] = defaultdict(set)
        for fid, rows in enumerate(clusterer.clusters_):
            for r in rows:
                fids_of_row[r].add(fid)
        gmms: list[OnlineGMM | None] = []
        guarded: dict[int, tuple[int, set[str]]] = {}
        point_of: dict[str, tuple[int, int]] = {}
        node_at: dict[tuple[int, int], str] = {}
        for g, local in enumerate(clusterer.local_models_):
            rows = [int(r) for r in local.members]
            if local.gmm is None:
                gmms.append(None)
                guarded[g] = (int(local.cluster_ids[0]), {member_ids[r] for r in rows})
                for r in rows:
                    point_of[member_ids[r]] = (g, GUARDED)
                continue
            comp_of = {fid: j for j, fid in enumerate(local.cluster_ids) if fid >= 0}
            memberships = [{comp_of[f] for f in fids_of_row[r] if f in comp_of} for r in rows]
            gmms.append(
                OnlineGMM.from_gmm(
                    local.gmm,
                    local.embedding,
                    cluster_ids=list(local.cluster_ids),
                    memberships=memberships,
                    threshold=clusterer.threshold,
                    tau_n=tau,
                    tau_c=tau_c,
                    ids=ids,
                    random_state=clusterer.random_state,
                )
            )
            for pid, r in enumerate(rows):
                point_of[member_ids[r]] = (g, pid)
                node_at[(g, pid)] = member_ids[r]
        return cls(layer, clusterer, gmms, guarded, point_of, node_at, dict(cluster_nodes), greedy)

    # -- read access -----------------------------------------------------------------------------

    def members(self, cid: int) -> list[str]:
        """Return the node ids of cluster ``cid`` (sorted; empty if it does not exist)."""
        for gcid, nodes in self.guarded.values():
            if gcid == cid:
                return sorted(nodes)
        for g, gmm in enumerate(self.gmms):
            if gmm is not None and cid in gmm.members:
                return sorted(self.node_at[(g, p)] for p in gmm.members[cid])
        return []

    def clusters_of(self, node_id: str) -> set[int]:
        """Return the cluster ids a node of this layer belongs to."""
        g, pid = self.point_of[node_id]
        if pid == GUARDED:
            return {self.guarded[g][0]}
        gmm = self.gmms[g]
        assert gmm is not None
        return set(gmm.memberships(pid))

    # -- updates ---------------------------------------------------------------------------------

    def add(self, node_id: str, vector: NDArray[np.float32], delta: LayerDelta) -> None:
        """Place a new node (adRAP Algorithm 5, steps 3-6)."""
        self.add_many([node_id], vector.reshape(1, -1), delta)

    def add_many(self, node_ids: list[str], X: NDArray[np.float32], delta: LayerDelta) -> None:
        """Place new nodes one after the other, with their UMAP transforms computed in one go.

        The stored UMAP models do not change with the online GMMs, so transforming the whole
        batch first gives the same reduced points as transforming each on arrival, for a
        fraction of the cost (one nearest-neighbour query and layout per global cluster).
        """
        if not node_ids:
            return
        groups = self.clusterer.predict_global(X)
        local: dict[int, NDArray[np.float32]] = {}
        for label in np.unique(groups):
            rows = np.flatnonzero(groups == label)
            if self.gmms[int(label)] is not None:
                reduced = self.clusterer.transform_local(int(label), X[rows])
                for r, point in zip(rows.tolist(), reduced, strict=True):
                    local[r] = point
        for row, node_id in enumerate(node_ids):
            g = int(groups[row])
            gmm = self.gmms[g]
            if gmm is None:
                cid, nodes = self.guarded[g]
                nodes.add(node_id)
                self.point_of[node_id] = (g, GUARDED)
                delta.absorb([cid], [], [], [])
                continue
            result = gmm.add_greedy(local[row]) if self.greedy else gmm.add(local[row])
            self.point_of[node_id] = (g, result.point)
            self.node_at[(g, result.point)] = node_id
            delta.absorb(result.dirty, result.created, result.split, result.removed)

    def remove(self, node_id: str, delta: LayerDelta) -> None:
        """Drop a node from its clusters; clusters left empty are removed."""
        g, pid = self.point_of.pop(node_id)
        if pid == GUARDED:
            cid, nodes = self.guarded[g]
            nodes.discard(node_id)
            delta.absorb([] if not nodes else [cid], [], [], [cid] if not nodes else [])
            return
        del self.node_at[(g, pid)]
        gmm = self.gmms[g]
        assert gmm is not None
        result = gmm.remove(pid)
        delta.absorb(result.dirty, result.created, result.split, result.removed)

    def replace(self, old_id: str, new_id: str, delta: LayerDelta) -> None:
        """Give a regenerated node its predecessor's place (same point, new node id)."""
        g, pid = self.point_of.pop(old_id)
        self.point_of[new_id] = (g, pid)
        if pid == GUARDED:
            _cid, nodes = self.guarded[g]
            nodes.discard(old_id)
            nodes.add(new_id)
        else:
            self.node_at[(g, pid)] = new_id
        delta.absorb(self.clusters_of(new_id), [], [], [])

    def __len__(self) -> int:
        return len(self.point_of)
