"""Keeping a layer's groups fit: local refits and cuts of oversized global clusters [A §4.4].

A :class:`GroupUpkeep` is the collaborator of an :class:`~ingestor.cluster.adaptive.AdaptiveLayer`
that keeps its global clusters ("groups") fit. Each of its steps acts on one group and costs the
group's size, never the layer's:

* :meth:`GroupUpkeep.refit` runs the build's clustering on a group whose members changed too much
  since its local model was fitted (:mod:`ingestor.cluster.group_refit`), or on a guarded group
  that grew past ``tau_c`` (its promotion to a local model);
* :meth:`GroupUpkeep.cut` cuts a cluster that outgrew its group's fit in two on its own members;
* :meth:`GroupUpkeep.split` cuts a group past the clusterer's ``max_group`` points into parts of at
  most that size (:mod:`ingestor.cluster.global_split`), each keeping the group's local model and
  its clusters restricted to the part (no fit: a cluster inside one part is left as it was).

Clusters keep the id of the old cluster they overlap most, so a cluster a refit leaves as it was
keeps its summary; the layer's delta gets the clusters that changed, appeared or disappeared.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, MutableMapping
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.global_split import bound_groups
from ingestor.cluster.group_refit import GroupFit, group_fit, refit_group
from ingestor.cluster.layer_state import GUARDED, LayerDelta, LayerState, Vectors, edit, prefetch
from ingestor.cluster.online_gmm import OnlineGMM

__all__ = ["OUTGROWN", "GroupUpkeep", "outgrown_limit"]

log = logging.getLogger(__name__)

#: A cluster of a group has outgrown the group's fit once it holds more than ``max(tau_c, OUTGROWN
#: x`` the largest cluster that fit made). Algorithm 2 offers a cluster past tau_c a split into
#: k' = 1, 2, 3 components by BIC on its own points only, and in a 10-d local space a cluster of
#: ~20 points rarely earns a second full-covariance component (66 parameters), so with real
#: embeddings a cluster kept growing where a fit of the whole group breaks it up: through a running
#: daemon (5,000 soak operations, MiniLM) the largest layer-1 cluster reached 19 leaves in a group
#: of 77 whose last fit had made clusters of at most 11, while a rebuild's largest was 8 (the
#: issue's bound: twice a rebuild's). Such a cluster is cut (:meth:`GroupUpkeep.cut`) in two on its
#: own members, and its parts again while past the bound: the cost of the cluster. The group is
#: refitted only when a cut cannot be made (a part would hold fewer than ``min_split_size``
#: members). A refit of the group each time (session 14) cost groups of 200-700 points at 265k
#: leaves, 0.7-1.5 s each: it raised the mean one-document add from 0.30 to 0.68 s there, as the
#: upper layers' summaries move between clusters at every update. The factor is above 1 so that
#: clusters a fit made are not cut on their next arrival.
OUTGROWN: Final = 1.25


def outgrown_limit(gmm: OnlineGMM) -> float:
    """The most members a cluster of this group may hold before the group is refitted."""
    return max(gmm.tau_c, OUTGROWN * gmm.fitted_largest)


class GroupUpkeep:
    """The upkeep of one layer's groups: which group holds each cluster, when a group's local
    model is stale or the group too large, and the refits and cuts that keep them fit.

    Everything it keeps is the layer's (:class:`~ingestor.cluster.layer_state.LayerState`: its
    groups' models, where its nodes sit, its thresholds and counters), which the tree's store
    writes field by field; it holds nothing of its own, so the layer makes one when asked
    (``AdaptiveLayer.groups``).
    """

    def __init__(self, layer: LayerState) -> None:
        self.layer = layer

    # -- where clusters and nodes are ------------------------------------------------------------

    def index(self) -> MutableMapping[int, int]:
        """Return cluster id -> global group, made on first use (one pass over the groups)."""
        al = self.layer
        index = al.cluster_group
        if not al.cluster_index_built:
            for g in range(len(al.gmms)):
                gmm = al.gmms[g]
                if gmm is None:
                    index[al.guarded[g][0]] = g
                else:
                    index.update(dict.fromkeys(gmm.members, g))
            al.cluster_index_built = True
        return index

    def note(self, g: int, created: Iterable[int]) -> None:
        """Record the global group of clusters that just appeared (see ``AdaptiveLayer.members``)."""
        index = self.index()
        for cid in created:
            index[cid] = g

    def forget(self, removed: Iterable[int]) -> None:
        """Drop clusters that are gone from the cluster -> group index (ids are never reused;
        an emptied guarded group's cluster, which may be refilled, is found again on a miss).
        Without this the index kept every cluster ever made: a long life's splits and refits."""
        for cid in removed:
            self.layer.cluster_group.pop(cid, None)

    def members_of(self, g: int) -> tuple[list[str], list[int], dict[int, frozenset[str]]]:
        """Return group g's member nodes (sorted), their point ids and its clusters' members."""
        al = self.layer
        gmm = al.gmms[g]
        if gmm is None:
            cid, members = al.guarded[g]
            nodes = sorted(members)
            return nodes, list(range(len(nodes))), {cid: frozenset(nodes)}
        prefetch(al.node_at, [(g, p) for p in gmm.point_ids])
        at = {p: al.node_at[(g, p)] for p in gmm.point_ids}
        pid_of = {n: p for p, n in at.items()}
        nodes = sorted(pid_of)
        old = {cid: frozenset(at[p] for p in m) for cid, m in gmm.members.items()}
        return nodes, [pid_of[n] for n in nodes], old

    # -- when a group needs its upkeep -----------------------------------------------------------

    def due(self, gmm: OnlineGMM, coming: int) -> bool:
        """Whether a group's local model is stale once ``coming`` more points have changed."""
        return gmm.churn + coming > max(self.layer.tau_c, self.layer.refit_share * gmm.fitted)

    def oversized(self, n: int) -> bool:
        """Whether a group of ``n`` points must be cut (see :mod:`~ingestor.cluster.global_split`)."""
        limit = getattr(self.layer.clusterer, "max_group", None)
        return limit is not None and n > limit

    def outgrown(self, gmm: OnlineGMM) -> bool:
        """Whether a cluster of the group holds more than ``max(tau_c, OUTGROWN x`` the largest
        cluster the group's last fit made) members (a cost of the group's clusters, not of its
        points)."""
        if math.isinf(self.layer.refit_share):  # the paper's frozen local models: no refits
            return False
        largest = max((len(m) for m in gmm.members.values()), default=0)
        return largest > outgrown_limit(gmm)

    def keep_fit(self, touched: Iterable[int], vectors: Vectors | None, delta: LayerDelta) -> None:
        """Give each group a batch ``touched`` what it needs, in this order: a guarded group past
        ``tau_c`` members its local model (:meth:`refit`); a group past ``max_group`` points its
        cut into parts, each then checked as any group (:meth:`split`); a group whose model is
        stale (:meth:`due`) a refit; a group with an outgrown cluster that cut (:meth:`cut`), or
        a refit if the cut cannot be made. ``vectors`` (None: no fits) give the members'
        embeddings."""
        al = self.layer
        work = sorted(touched)
        while work:
            g = work.pop(0)
            gmm = al.gmms[g]
            if gmm is None:
                if len(al.guarded[g][1]) <= max(al.tau_c, 3):
                    continue
                if vectors is None:
                    raise ValueError(
                        f"layer {al.layer}: global cluster {g} outgrew tau_c={al.tau_c}; "
                        "pass vectors= so it can get a local model"
                    )
                self.refit(g, vectors, delta)
                promoted = al.gmms[g]
                if promoted is not None and self.oversized(promoted.n):
                    work.insert(0, g)  # promoted past max_group in one batch: cut it next
            elif vectors is not None and self.oversized(gmm.n):
                work[:0] = self.split(g, vectors, delta)  # parts: checked as any
            elif (vectors is not None and gmm.n > 0 and self.due(gmm, 0)) or (
                self.outgrown(gmm) and not self.cut(g, delta) and vectors is not None
            ):
                self.refit(g, vectors, delta)

    # -- the upkeep ------------------------------------------------------------------------------

    def cut(self, g: int, delta: LayerDelta) -> bool:
        """Cut group ``g``'s clusters past :func:`outgrown_limit` in two on their own members
        (:meth:`OnlineGMM.cut`), and their parts again while past it: the cost of those clusters,
        not of the group. Return whether none is left past it (False: a part would hold fewer
        than ``min_split_size`` members; the caller refits the group)."""
        al = self.layer
        gmm = edit(al.gmms, g)
        assert gmm is not None
        limit = outgrown_limit(gmm)
        old_ids, cut_ids = set(gmm.members), set()
        for _ in range(gmm.n):  # each cut makes one cluster more: bounded
            over = [c for c, m in gmm.members.items() if len(m) > limit]
            if not over:
                break
            cid = max(over, key=lambda c: len(gmm.members[c]))
            if not gmm.cut(cid):
                break
            cut_ids.add(cid)
        created = gmm.members.keys() - old_ids
        for cid in cut_ids | created:  # made by a split: offered theirs (see OnlineGMM.offered)
            if len(gmm.members[cid]) > gmm.tau_c:
                gmm.offered[cid] = len(gmm.members[cid])
        delta.absorb(cut_ids | created, created, cut_ids, [])
        self.note(g, created)
        return all(len(m) <= limit for m in gmm.members.values())

    def refit(self, g: int, vectors: Vectors, delta: LayerDelta) -> None:
        """Fit group ``g``'s local model afresh on its members, as a build of them would.

        Numbers of clusters are chosen by BIC (so every cluster is offered its split, and a
        group whose clusters shrank gets fewer). Clusters keep the id of the old cluster they
        overlap most; the delta gets the ones whose members changed, appeared or disappeared.
        Cost: the group's size (UMAPs and BIC searches on its members, never the layer's).
        """
        al = self.layer
        nodes, pids, old = self.members_of(g)
        placed = al.gmms[g] is not None
        fit = refit_group(
            al.clusterer,
            nodes,
            vectors(nodes),
            old,
            point_ids=pids,
            ids=al.ids,
            tau_n=al.tau_n,
            tau_c=al.tau_c,
        )
        self.install(g, fit, nodes, pids, placed=placed)
        delta.refitted(old, fit.clusters, split=not placed and len(fit.clusters) > 1)
        log.debug("layer %d group %d refitted: %d clusters", al.layer, g, len(fit.clusters))

    def split(self, g: int, vectors: Vectors, delta: LayerDelta) -> list[int]:
        """Cut group ``g`` (past ``max_group`` points) into parts of at most ``max_group`` points.

        The cuts are made in the global UMAP space and replace the group's component of the
        global mixture, so later nodes are routed to the parts; the first part stays group
        ``g``, the others become new groups. Each part keeps the group's local UMAP and its
        clusters, restricted to the part's members (:func:`_part`): a cluster inside one part is
        unchanged (its summary stays), one the cut crosses keeps its id in the part holding most
        of it and becomes a new cluster in the other. Cost: the group's global UMAP transform and
        the 2-means cut, amortised over the ``max_group / 2`` insertions it takes to fill a part
        again. Fitting each part afresh (the build's two steps) cost ~1 s per part of 500 points
        at 265k leaves and changed most of the group's clusters; a part is refitted when its
        share of the group's changes comes due (:meth:`due`), as the group would have been. A
        group due already (its new points were placed for a refit) is refitted part by part.

        Returns:
            The parts (``g`` and the new groups) to check as any group; none if they were
            refitted.
        """
        al = self.layer
        c = al.clusterer
        gmm = al.gmms[g]
        assert gmm is not None, "only a group with a local model grows past max_group"
        umap, stale, first = c.local_models_[g].umap, self.due(gmm, 0), len(al.gmms)
        nodes, pids, old = self.members_of(g)
        X = vectors(nodes)
        k_before = int(c.global_gmm_.n_components)
        comp = np.full(len(nodes), int(c.global_components_[g]), dtype=np.intp)
        c.global_gmm_, comp = bound_groups(
            c.global_gmm_, c.transform_global(X), comp, c.max_group, random_state=c.random_state
        )
        new_comps = list(range(k_before, int(c.global_gmm_.n_components)))
        c.global_components_ = np.concatenate([c.global_components_, new_comps]).astype(np.intp)
        al.global_version += 1
        parts = [int(c.global_components_[g]), *new_comps]
        part_of = {pid: parts.index(int(k)) for pid, k in zip(pids, comp.tolist(), strict=True)}
        owner = {  # each cluster keeps its id in the part holding most of its members
            cid: Counter(part_of[p] for p in m).most_common(1)[0][0]
            for cid, m in gmm.members.items()
        }
        row, points = {p: i for i, p in enumerate(gmm.point_ids)}, gmm.points
        made: dict[int, frozenset[str]] = {}
        for j, part in enumerate(parts):
            rows = np.flatnonzero(comp == part)
            group = g if j == 0 else len(al.gmms)
            members, part_pids = [nodes[r] for r in rows], [pids[r] for r in rows]
            ids = part_pids if j == 0 else list(range(len(rows)))
            if j == 0:
                for r in np.flatnonzero(comp != part):
                    del al.node_at[(g, pids[r])]
            Y = points[[row[p] for p in part_pids]]
            fit = _part(gmm, umap, Y, part_pids, ids, members, owner, j)
            self.install(group, fit, members, ids, placed=j == 0, fitted=False)
            made.update(fit.clusters)
        delta.refitted(old, made, split=True)
        al.group_splits += 1
        log.info(
            "layer %d: global cluster %d (%d nodes) cut into %d parts of at most %d",
            al.layer,
            g,
            len(nodes),
            len(new_comps) + 1,
            c.max_group,
        )
        cut_parts = [g, *range(first, len(al.gmms))]
        for h in cut_parts if stale else ():
            self.refit(h, vectors, delta)
        return [] if stale else cut_parts

    def install(
        self,
        g: int,
        fit: GroupFit,
        nodes: list[str],
        pids: list[int],
        *,
        placed: bool,
        fitted: bool = True,
    ) -> None:
        """Make ``fit`` group ``g``'s model (``g == len(gmms)``: a new group). ``placed``: the
        nodes hold points ``(g, pid)`` already (a refit of a group that had a local model);
        ``fitted``: the model was fitted (counted in ``refits``), not a part of a cut group's."""
        al = self.layer
        if g == len(al.gmms):
            al.gmms.append(fit.online)
            al.clusterer.local_models_.append(fit.local)
        else:
            al.gmms[g] = fit.online
            al.clusterer.local_models_[g] = fit.local
        al.refits += fitted
        if fit.online is None:
            (cid,) = fit.clusters
            al.guarded[g] = (cid, set(nodes))
            for n, p in zip(nodes, pids, strict=True):
                al.point_of[n] = (g, GUARDED)
                if placed:
                    del al.node_at[(g, p)]
        else:
            if g in al.guarded:
                del al.guarded[g]
            if not placed:
                for n, p in zip(nodes, pids, strict=True):
                    al.point_of[n] = (g, p)
                    al.node_at[(g, p)] = n
        self.note(g, fit.clusters)


def _part(
    gmm: OnlineGMM,
    umap: Any,
    Y: NDArray[np.float64],
    part: list[int],
    ids: list[int],
    nodes: list[str],
    owner: dict[int, int],
    j: int,
) -> GroupFit:
    """Part ``j`` of a cut group: the group's clusters restricted to the points ``part`` (the
    group's point ids, at ``Y`` in the group's local UMAP space; ``ids`` their ids in the part,
    ``nodes`` their nodes). A cluster named by another part (``owner``) gets a fresh id here.

    Each cluster keeps the size it was last offered its split at (a part of a cluster is no
    larger than the cluster), and the part carries its share of the group's changes since its
    fit, so it comes due when the group would have.
    """
    inside = set(part)
    clusters = [(cid, m & inside) for cid, m in gmm.members.items() if m & inside]
    chosen = np.zeros((len(part), len(clusters)), dtype=bool)
    at = {p: i for i, p in enumerate(part)}
    for k, (_, m) in enumerate(clusters):
        chosen[[at[p] for p in m], k] = True
    fit = group_fit(
        Y,
        chosen,
        umap,
        nodes,
        ids,
        [cid if owner[cid] == j else -1 for cid, _ in clusters],
        reg_covar=gmm.reg_covar,
        threshold=gmm.threshold,
        tau_n=gmm.tau_n,
        tau_c=gmm.tau_c,
        ids=gmm.ids,
        random_state=gmm.random_state,
        max_iter=gmm.max_iter,
        min_split_size=gmm.min_split_size,
    )
    online = fit.online
    assert online is not None
    share = len(part) / gmm.n
    online.offered = {
        new: gmm.offered[cid]
        for new, (cid, _) in zip(online.cluster_ids, clusters, strict=True)
        if cid in gmm.offered
    }
    online.fitted = max(1, round(gmm.fitted * share))
    online.churn = round(gmm.churn * share)
    online.fitted_largest = gmm.fitted_largest
    return fit
