"""Keeping a layer's groups fit: local refits and cuts of oversized global clusters [A §4.4].

Both act on one global cluster ("group") of a layer (:class:`GroupedLayer`)
and cost its size, never the layer's:

* :func:`refit` runs the build's clustering on a group whose members changed too much since its
  local model was fitted (:mod:`ingestor.cluster.group_refit`), or on a guarded group that grew
  past ``tau_c`` (its promotion to a local model);
* :func:`split` cuts a group past the clusterer's ``max_group`` points into parts of at most that
  size (:mod:`ingestor.cluster.global_split`), each keeping the group's local model and its
  clusters restricted to the part (no fit: a cluster inside one part is left as it was).

Clusters keep the id of the old cluster they overlap most, so a cluster a refit leaves as it was
keeps its summary; the layer's delta gets the clusters that changed, appeared or disappeared.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final, Protocol

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.global_split import bound_groups
from ingestor.cluster.group_refit import GroupFit, group_fit, refit_group
from ingestor.cluster.incremental import GUARDED, LayerDelta, Vectors, prefetch
from ingestor.cluster.online_gmm import IdCounter, OnlineGMM

__all__ = [
    "OUTGROWN",
    "GroupedLayer",
    "cut",
    "due",
    "install",
    "members_of",
    "outgrown",
    "outgrown_limit",
    "oversized",
    "refit",
    "report",
    "split",
]

log = logging.getLogger(__name__)

#: A cluster of a group has outgrown the group's fit once it holds more than ``max(tau_c, OUTGROWN
#: x`` the largest cluster that fit made). Algorithm 2 offers a cluster past tau_c a split into
#: k' = 1, 2, 3 components by BIC on its own points only, and in a 10-d local space a cluster of
#: ~20 points rarely earns a second full-covariance component (66 parameters), so with real
#: embeddings a cluster kept growing where a fit of the whole group breaks it up: through a running
#: daemon (5,000 soak operations, MiniLM) the largest layer-1 cluster reached 19 leaves in a group
#: of 77 whose last fit had made clusters of at most 11, while a rebuild's largest was 8 (the
#: issue's bound: twice a rebuild's). Such a cluster is :func:`cut` in two on its own members, and
#: its parts again while past the bound: the cost of the cluster. The group is refitted only when
#: a cut cannot be made (a part would hold fewer than ``min_split_size`` members). A refit of the
#: group each time (session 14) cost groups of 200-700 points at 265k leaves, 0.7-1.5 s each: it
#: raised the mean one-document add from 0.30 to 0.68 s there, as the upper layers' summaries
#: move between clusters at every update. The factor is above 1 so that clusters a fit made are
#: not cut on their next arrival.
OUTGROWN: Final = 1.25


class GroupedLayer(Protocol):
    """What keeping a layer's groups fit reads and changes of the layer
    (:class:`~ingestor.cluster.adaptive.AdaptiveLayer`): its groups' models, where its nodes
    sit, its thresholds and counters."""

    layer: int
    clusterer: Any
    gmms: list[OnlineGMM | None]
    guarded: dict[int, tuple[int, set[str]]]
    point_of: dict[str, tuple[int, int]]
    node_at: dict[tuple[int, int], str]
    tau_n: int
    tau_c: int
    ids: IdCounter
    refit_share: float
    refits: int
    group_splits: int
    global_version: int

    def note(self, g: int, created: Iterable[int]) -> None:
        """Record the global group of clusters that just appeared."""


def members_of(al: GroupedLayer, g: int) -> tuple[list[str], list[int], dict[int, frozenset[str]]]:
    """Return group g's member nodes (sorted), their point ids and its clusters' members."""
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


def due(al: GroupedLayer, gmm: OnlineGMM, coming: int) -> bool:
    """Whether a group's local model is stale once ``coming`` more points have changed."""
    return gmm.churn + coming > max(al.tau_c, al.refit_share * gmm.fitted)


def oversized(al: GroupedLayer, n: int) -> bool:
    """Whether a group of ``n`` points must be cut (see :mod:`~ingestor.cluster.global_split`)."""
    limit = getattr(al.clusterer, "max_group", None)
    return limit is not None and n > limit


def outgrown(al: GroupedLayer, gmm: OnlineGMM) -> bool:
    """Whether a cluster of the group holds more than ``max(tau_c, OUTGROWN x`` the largest cluster
    the group's last fit made) members (a cost of the group's clusters, not of its points)."""
    if math.isinf(al.refit_share):  # the paper's frozen local models: no refits at all
        return False
    largest = max((len(m) for m in gmm.members.values()), default=0)
    return largest > outgrown_limit(gmm)


def outgrown_limit(gmm: OnlineGMM) -> float:
    """The most members a cluster of this group may hold before the group is refitted."""
    return max(gmm.tau_c, OUTGROWN * gmm.fitted_largest)


def cut(al: GroupedLayer, g: int, delta: LayerDelta) -> bool:
    """Cut group ``g``'s clusters past :func:`outgrown_limit` in two on their own members
    (:meth:`OnlineGMM.cut`), and their parts again while past it: the cost of those clusters,
    not of the group. Return whether none is left past it (False: a part would hold fewer than
    ``min_split_size`` members; the caller refits the group)."""
    gmm = al.gmms[g]
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
    al.note(g, created)
    return all(len(m) <= limit for m in gmm.members.values())


def refit(al: GroupedLayer, g: int, vectors: Vectors, delta: LayerDelta) -> None:
    """Fit group ``g``'s local model afresh on its members, as a build of them would.

    Numbers of clusters are chosen by BIC (so every cluster is offered its split, and a
    group whose clusters shrank gets fewer). Clusters keep the id of the old cluster they
    overlap most; the delta gets the ones whose members changed, appeared or disappeared.
    Cost: the group's size (UMAPs and BIC searches on its members, never the layer's).
    """
    nodes, pids, old = members_of(al, g)
    placed = al.gmms[g] is not None
    fit = _fit(al, nodes, vectors(nodes), old, pids)
    install(al, g, fit, nodes, pids, placed=placed)
    report(old, fit.clusters, delta, split=not placed and len(fit.clusters) > 1)
    log.debug("layer %d group %d refitted: %d clusters", al.layer, g, len(fit.clusters))


def split(al: GroupedLayer, g: int, vectors: Vectors, delta: LayerDelta) -> list[int]:
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
    share of the group's changes comes due (:func:`due`), as the group would have been. A group
    due already (its new points were placed for a refit) is refitted part by part.

    Returns:
        The parts (``g`` and the new groups) to check as any group; none if they were refitted.
    """
    c = al.clusterer
    gmm = al.gmms[g]
    assert gmm is not None, "only a group with a local model grows past max_group"
    umap, stale, first = c.local_models_[g].umap, due(al, gmm, 0), len(al.gmms)
    nodes, pids, old = members_of(al, g)
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
        cid: Counter(part_of[p] for p in m).most_common(1)[0][0] for cid, m in gmm.members.items()
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
        install(al, group, fit, members, ids, placed=j == 0, fitted=False)
        made.update(fit.clusters)
    report(old, made, delta, split=True)
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
        refit(al, h, vectors, delta)
    return [] if stale else cut_parts


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


def _fit(
    al: GroupedLayer,
    nodes: list[str],
    X: NDArray[np.float32],
    old: dict[int, frozenset[str]],
    pids: list[int],
) -> GroupFit:
    return refit_group(
        al.clusterer,
        nodes,
        X,
        old,
        point_ids=pids,
        ids=al.ids,
        tau_n=al.tau_n,
        tau_c=al.tau_c,
    )


def install(
    al: GroupedLayer,
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
    ``fitted``: the model was fitted (counted in ``al.refits``), not a part of a cut group's."""
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
    al.note(g, fit.clusters)


def report(
    old: dict[int, frozenset[str]],
    new: dict[int, frozenset[str]],
    delta: LayerDelta,
    *,
    split: bool,
) -> None:
    """Add to ``delta`` the clusters a refit changed, created and removed."""
    created = new.keys() - old.keys()
    changed = [c for c in new.keys() & old.keys() if new[c] != old[c]]
    delta.absorb(changed, created, list(old) if split and created else [], old.keys() - new)
