"""The online clustering of one tree layer: adRAP's placement of new nodes [A §4.2-4.4].

An :class:`AdaptiveLayer` wraps the fitted two-step clusterer of a layer. A new node goes through
the stored global UMAP ``transform`` to its most probable global cluster, through that cluster's
local UMAP ``transform`` into its :class:`~ingestor.cluster.online_gmm.OnlineGMM` (Algorithm 2), and the
layer reports which clusters changed, were created or were removed, so only their summaries are
regenerated. Each cluster id maps to the summary node(s) of the layer above (more than one when a
cluster had to be cut to fit the summariser's input limit; one node for several clusters when soft
clustering gave them the same members).

Every node of the layer is exactly one point: adRAP moves a regenerated summary by removing its
predecessor's point and placing the new node at its new embedding. A global cluster ("group") too
small for a local UMAP + GMM ("guarded") is one cluster until it grows past ``tau_c`` members. A
group whose points changed by more than ``max(tau_c, refit_share x`` its fitted size) since its
local model was fitted (a node moved within its group is one changed point, not a removal and an
addition), and a guarded group past ``tau_c``, get the build's steps run on their current members
(:mod:`ingestor.cluster.group_refit`): cost O(group), amortised over the changes. A cluster that
outgrew the clusters its group's fit made (:data:`~ingestor.cluster.group_upkeep.OUTGROWN`) is cut
in two on its own members (cost O(cluster)). That upkeep of the groups is the layer's collaborator's
(:class:`~ingestor.cluster.group_upkeep.GroupUpkeep`, :attr:`AdaptiveLayer.groups`); what the layer
holds is :class:`~ingestor.cluster.layer_state.LayerState`.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.digest import same_digest, vector_digest
from ingestor.cluster.group_upkeep import GroupUpkeep
from ingestor.cluster.layer_state import (
    GUARDED,
    REFIT_SHARE,
    LayerDelta,
    LayerState,
    Vectors,
    edit,
    prefetch,
)
from ingestor.cluster.online_gmm import IdCounter, OnlineGMM

log = logging.getLogger(__name__)

__all__ = ["GUARDED", "AdaptiveLayer", "LayerDelta", "Vectors", "same_digest", "vector_digest"]


class AdaptiveLayer(LayerState):
    """Online clustering of layer ``layer``'s nodes into the summaries of layer ``layer + 1``:
    new nodes placed, removed nodes dropped, and what changed reported in a :class:`LayerDelta`.
    Its fields are :class:`~ingestor.cluster.layer_state.LayerState`'s; its groups are kept fit
    by :attr:`groups`.
    """

    @property
    def groups(self) -> GroupUpkeep:
        """The upkeep of this layer's groups, over this layer's fields (it holds none of its own,
        so one is made on use: nothing of it is stored with the layer)."""
        return GroupUpkeep(self)

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
        vectors: NDArray[np.float32] | None = None,
        refit_share: float = REFIT_SHARE,
    ) -> AdaptiveLayer:
        """Wrap a freshly fitted clusterer; ``cluster_nodes`` maps its final cluster ids to nodes.

        ``vectors`` (rows of ``member_ids``) are what the clusterer was fitted on; summary layers
        record their digests (see :attr:`placed`).
        """
        n = len(member_ids)
        tau = tau_n if tau_n is not None else max(100, math.isqrt(n))
        ids = IdCounter(next_id=int(clusterer.n_clusters_))
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
            gmms.append(
                OnlineGMM.from_gmm(
                    local.gmm,
                    local.embedding,
                    cluster_ids=list(local.cluster_ids),
                    memberships=_memberships(local, clusterer.clusters_),
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
        placed: dict[str, tuple[float, ...]] = {}
        if layer > 0 and vectors is not None:
            placed = {m: vector_digest(v) for m, v in zip(member_ids, vectors, strict=True)}
        made = cls(
            layer,
            clusterer,
            gmms,
            guarded,
            point_of,
            node_at,
            dict(cluster_nodes),
            greedy,
            tau,
            tau_c,
            ids,
            placed,
            refit_share=refit_share,
        )
        made.groups.index()
        return made

    # -- read access -----------------------------------------------------------------------------

    def members(self, cid: int) -> list[str]:
        """Return the node ids of cluster ``cid`` (sorted; empty if it does not exist).

        The cluster's global group comes from an index kept as clusters appear, so this costs
        the cluster's size; a miss (a layer stored before the index) scans once and repairs it.
        """
        index = self.groups.index()
        g = index.get(cid)
        found = self._members_in(g, cid) if g is not None else None
        if found is not None:
            return found
        for g in range(len(self.gmms)):  # not indexed: find it, then remember where
            found = self._members_in(g, cid)
            if found is not None:
                index[cid] = g
                return found
        return []

    def _members_in(self, g: int, cid: int) -> list[str] | None:
        gmm = self.gmms[g]
        if gmm is None:
            gcid, nodes = self.guarded[g]
            return sorted(nodes) if gcid == cid else None
        if cid in gmm.members:
            keys = [(g, p) for p in gmm.members[cid]]
            prefetch(self.node_at, keys)
            return sorted(self.node_at[k] for k in keys)
        return None

    def prefetch(self, node_ids: Iterable[str]) -> None:
        """Load where the given nodes sit in one read, before asking for each (a stored layer
        reads its maps row by row on first use)."""
        prefetch(self.point_of, node_ids)

    def clusters_of(self, node_id: str) -> set[int]:
        """Return the cluster ids a node of this layer belongs to."""
        g, pid = self.point_of[node_id]
        if pid == GUARDED:
            return {self.guarded[g][0]}
        gmm = self.gmms[g]
        assert gmm is not None
        return set(gmm.memberships(pid))

    def names(self, summary: str, children: Iterable[str]) -> bool:
        """Return True if a cluster still maps to node ``summary`` of the layer above.

        Only clusters of the summary's ``children`` can name it, so this costs the size of one
        summary, not of the layer.
        """
        return any(
            summary in self.cluster_nodes.get(cid, ())
            for child in children
            if child in self.point_of
            for cid in self.clusters_of(child)
        )

    # -- updates ---------------------------------------------------------------------------------

    def add(self, node_id: str, vector: NDArray[np.float32], delta: LayerDelta) -> None:
        """Place a new node (adRAP Algorithm 5, steps 3-6)."""
        self.add_many([node_id], vector.reshape(1, -1), delta)

    def add_many(
        self,
        node_ids: list[str],
        X: NDArray[np.float32],
        delta: LayerDelta,
        vectors: Vectors | None = None,
    ) -> None:
        """Place new nodes one after the other, with their UMAP transforms computed in one go,
        then refit the local model of every group of this batch that changed enough.

        The stored UMAP models do not change with the online GMMs, so transforming the whole
        batch first gives the same reduced points as transforming each on arrival, for a
        fraction of the cost (one nearest-neighbour query and layout per global cluster).
        Call it once per batch, after the batch's removals (with an empty ``node_ids`` if there
        are no new nodes): the groups those touched are checked here too. A group's local UMAP +
        GMM is fitted afresh on its members (embeddings from ``vectors``) when

        * it is guarded and ends the batch with more than ``tau_c`` members (promotion), or
        * more than ``max(tau_c, refit_share x n_fitted)`` of its points were added or removed
          since its local model was fitted on ``n_fitted`` points (a bounded local refit, see
          :mod:`ingestor.cluster.group_refit`); the new points of a group about to be refitted
          join its most probable cluster on the way, as the refit recomputes them all anyway;
        * one of its clusters holds more than ``max(tau_c, OUTGROWN x`` the largest cluster the
          group's last fit made) members (:data:`~ingestor.cluster.group_upkeep.OUTGROWN`) and
          cannot be cut in two on its own members (:meth:`GroupUpkeep.cut`, which runs first);
        * it holds more than the clusterer's ``max_group`` points: it is cut into parts of at
          most that size, each with its own local model (:mod:`ingestor.cluster.global_split`).

        (:meth:`GroupUpkeep.keep_fit`, after the placements.)
        """
        if any(node_id in self.point_of for node_id in node_ids):
            dup = [n for n in node_ids if n in self.point_of]
            raise ValueError(f"layer {self.layer} already holds node(s) {dup[:3]}: remove first")
        touched, moved_from = delta.take_removals()  # left there by this batch's removes
        groups = self.clusterer.predict_global(X) if node_ids else np.zeros(0, dtype=np.intp)
        # A node moved within its group (a rewritten summary placed again) is one changed point:
        # its removal was not counted, its placement is.
        stay = np.array(
            [moved_from.get(n, (-1,))[0] == int(g) for n, g in zip(node_ids, groups, strict=True)]
        )
        local: dict[int, NDArray[np.float32]] = {}
        refit: set[int] = set()  # groups whose new points only need a cheap placement
        for label in np.unique(groups):
            g, rows = int(label), np.flatnonzero(groups == label)
            gmm = self.gmms[g]
            if gmm is not None:
                reduced = self.clusterer.transform_local(g, X[rows])
                for r, point in zip(rows.tolist(), reduced, strict=True):
                    local[r] = point
                coming = int(len(rows) - stay[rows].sum())
                if vectors is not None and self.groups.due(gmm, coming):
                    refit.add(g)  # (a group cut for its size keeps its clusters: Algorithm 2)
        rows_of: dict[int, list[int]] = defaultdict(list)  # placed groups, rows in batch order
        for row, node_id in enumerate(node_ids):
            g = int(groups[row])
            touched.add(g)
            if self.layer > 0:
                self.placed[node_id] = vector_digest(X[row])
            if self.gmms[g] is not None:
                rows_of[g].append(row)
                continue
            cid, nodes = edit(self.guarded, g)
            nodes.add(node_id)
            self.point_of[node_id] = (g, GUARDED)
            delta.absorb([cid], [], [], [])
        for g, batch in rows_of.items():
            gmm = edit(self.gmms, g)
            assert gmm is not None
            if self.greedy or g in refit:
                results = [gmm.add_greedy(local[r]) for r in batch]
                pids = [result.point for result in results]
            else:  # Algorithm 2 per point, one full-EM refit per run of points while n ≤ τ_n
                pids, results = gmm.add_many(np.stack([local[r] for r in batch]))
            for row, pid in zip(batch, pids, strict=True):
                node_id = node_ids[row]
                was = moved_from.get(node_id)
                if was is not None and was[0] == g:  # its removal from this group was counted
                    gmm.churn -= 1
                    if g not in refit and gmm.memberships(pid) == was[1]:
                        gmm.churn -= 1  # back in the clusters it left: the model still fits it
                self.point_of[node_id] = (g, pid)
                self.node_at[(g, pid)] = node_id
            for result in results:
                delta.absorb(result.dirty, result.created, result.split, result.removed)
                self.groups.note(g, result.created)
        if self.greedy:
            return
        self.groups.keep_fit(touched, vectors, delta)

    def remove(self, node_id: str, delta: LayerDelta, *, moving: bool = False) -> None:
        """Drop a node from its clusters; clusters left empty are removed.

        ``moving``: the node is placed again by this batch's :meth:`add_many` (a rewritten
        summary); it then counts as one changed point of its group, not two, and as none when
        it lands back in the clusters it left (its group's model still describes it).
        """
        g, pid = self.point_of.pop(node_id)
        if moving:  # where it was, for add_many's count of changed points
            gmm = self.gmms[g]
            was = gmm.memberships(pid) if gmm is not None and pid != GUARDED else frozenset()
            delta.moving[node_id] = (g, was)
        self.placed.pop(node_id, None)
        delta.touched.add(g)  # add_many checks its refit
        if pid == GUARDED:
            cid, nodes = edit(self.guarded, g)
            nodes.discard(node_id)
            delta.absorb([] if not nodes else [cid], [], [], [cid] if not nodes else [])
            return
        del self.node_at[(g, pid)]
        gmm = edit(self.gmms, g)
        assert gmm is not None
        result = gmm.remove(pid)
        delta.absorb(result.dirty, result.created, result.split, result.removed)

    def rename(self, old: str, new: str) -> None:
        """Give node ``old``'s place to node ``new`` (the same text under another id: a moved
        file's leaf): the same point in the same clusters, so no cluster changes."""
        if new in self.point_of:
            raise ValueError(f"layer {self.layer} already holds node {new}: remove it first")
        g, pid = self.point_of.pop(old)
        self.point_of[new] = (g, pid)
        if pid == GUARDED:
            _, nodes = edit(self.guarded, g)
            nodes.discard(old)
            nodes.add(new)
        else:
            self.node_at[(g, pid)] = new
        digest = self.placed.pop(old, None)
        if digest is not None:
            self.placed[new] = digest

    def __len__(self) -> int:
        return len(self.point_of)


def _memberships(local: Any, clusters: list[tuple[int, ...]]) -> list[set[int]]:
    """Return, for each member of a local model, the components whose final clusters hold it.

    A local model's clusters hold its own members only, so this reads its clusters alone: no
    map of every row of the layer to its clusters (1M leaves: ~300 MB of sets, held at once).
    """
    members = np.asarray(local.members)
    out: list[set[int]] = [set() for _ in range(len(members))]
    for j, fid in enumerate(local.cluster_ids):
        if fid >= 0:
            for p in np.searchsorted(members, clusters[fid]).tolist():
                out[p].add(j)
    return out
