"""Re-cluster a region of a layer (a few neighbouring global clusters) as a build would: a repair.

adRAP keeps a layer's global clustering ("groups": the global UMAP + GMM) as built and refits a
group's local model when its members changed enough (:mod:`ingestor.cluster.group_refit`). Points
placed for months through a global UMAP fitted on other points end up in groups a rebuild would
not give them, and that is what a local refit cannot mend: it only re-cuts one group's members.
:func:`refit_region` re-runs both steps on the members of several neighbouring groups at once: the
global cut again, in the layer's own global UMAP space (k-means into as many parts as the build's
mean group size gives the region: a fresh global BIC on a few hundred points cut them into groups
of a handful, most too small for a local model, and repeated repairs fragmented the layer), then
the build's local step (``TreeClusterer.fit_local``: a local UMAP + GMM by BIC) in each part; the
parts replace those groups:

* in the layer's global mixture, each part is the M-step of its members in the layer's global UMAP
  space (as :func:`~ingestor.cluster.global_split.split_component` makes the halves of a cut
  group), so later nodes are routed to the parts by the same ``predict_global``; the first parts
  take the region's groups' places, more parts become new groups, and a region group left without
  a part stays as an empty guarded group whose component is given no weight (never chosen);
* each part's local model is the one the fit made, its clusters the fit's clusters;
* clusters take the ids of the old clusters (of the whole region) they share most members with
  (optimal matching, :func:`~ingestor.cluster.online_gmm.match_ids`), so a cluster that comes out
  with the same members keeps its id and its summary; the delta gets the others.

Cost: the fit of the region's points, never the layer's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.gmm import GaussianParams, gaussian_parameters, params_of, to_sklearn
from ingestor.cluster.group_refit import GroupFit, fresh_clusterer, group_fit
from ingestor.cluster.group_upkeep import GroupUpkeep
from ingestor.cluster.kmeans import kmeans_labels
from ingestor.cluster.layer_state import LayerDelta, LayerState, Vectors
from ingestor.cluster.online_gmm import match_ids
from ingestor.cluster.two_step import LocalModel

__all__ = ["RegionFit", "fit_region", "install_region", "neighbours", "refit_region"]

log = logging.getLogger(__name__)

#: The weight of an emptied group's global component: never the most probable one.
_NO_WEIGHT = 1e-300


def neighbours(al: LayerState, g: int, max_points: int, sizes: Sequence[int]) -> list[int]:
    """Group ``g`` and its nearest groups (their global components' means, in the global UMAP
    space), nearest first, while together they hold at most ``max_points`` points (``sizes``:
    each group's). Empty groups are left out."""
    c = al.clusterer
    if getattr(c, "global_gmm_", None) is None:
        return [g]
    means = np.asarray(c.global_gmm_.means_)
    comps = np.asarray(c.global_components_)
    dist = np.linalg.norm(means[comps] - means[comps[g]], axis=1)
    out, total = [g], sizes[g]
    for h in np.argsort(dist, kind="stable").tolist():
        if h == g or sizes[h] == 0:
            continue
        if total + sizes[h] > max_points:
            break
        out.append(int(h))
        total += sizes[h]
    return out


@dataclass
class RegionFit:
    """A region's fresh fit, not installed yet (:func:`fit_region`): the region's groups, its
    nodes (sorted), their vectors and global UMAP points, the parts (rows of ``nodes``), each
    part's local model and clusters (rows of the part), every cluster's members (``flat``, in
    part order) and the old id it takes (-1: a new cluster), the old clusters and each group's
    point ids."""

    groups: list[int]
    nodes: list[str]
    X: NDArray[np.float32]
    Y: NDArray[np.float64]
    parts: list[NDArray[np.intp]]
    locals: list[LocalModel]
    clusters: list[list[tuple[int, ...]]]
    flat: list[frozenset[str]]
    ids: list[int]
    old: dict[int, frozenset[str]]
    pids: dict[int, list[int]]

    def changed(self) -> list[frozenset[str]]:
        """The members of each cluster the fit changes or makes (its summary is regenerated);
        a cluster that keeps an old one's id and members keeps its summary."""
        return [m for m, i in zip(self.flat, self.ids, strict=True) if i < 0 or self.old[i] != m]


def fit_region(al: LayerState, groups: Sequence[int], vectors: Vectors) -> RegionFit:
    """Fit the members of ``groups`` afresh (see the module); the layer is not changed
    (:func:`install_region` makes the fit the region's groups).

    Raises:
        ValueError: the layer has no global model (it is one group) or ``groups`` is empty.
    """
    c = al.clusterer
    if getattr(c, "global_umap_", None) is None or not groups:
        raise ValueError(
            f"layer {al.layer}: cannot re-cluster groups {list(groups)!r}: the layer has one "
            "global cluster (too few nodes for a global UMAP); rebuild it instead (`adrap rebuild`)"
        )
    upkeep = GroupUpkeep(al)
    nodes: list[str] = []
    old: dict[int, frozenset[str]] = {}
    pids: dict[int, list[int]] = {}
    for g in groups:
        members, pids[g], clusters = upkeep.members_of(g)
        nodes.extend(members)
        old.update(clusters)
    nodes.sort()
    X = vectors(nodes)
    Y = np.asarray(c.transform_global(X), dtype=np.float64)
    m = len(nodes)
    size = c.build_group_size() or m
    k = max(1, min(m, round(m / size)))
    labels = np.zeros(m, dtype=np.intp)
    if k > 1:  # cut in a UMAP of the region's own points: the layer's was fitted on others
        _, fresh = fresh_clusterer(c).reduce_local(X)
        labels = kmeans_labels(np.asarray(fresh, dtype=np.float64), k, random_state=c.random_state)
    parts = [rows for j in range(k) if len(rows := np.flatnonzero(labels == j))]
    locals_: list[LocalModel] = []
    found_of: list[list[tuple[int, ...]]] = []
    flat: list[frozenset[str]] = []
    for rows in parts:
        if len(rows) <= c.n_components + 1:  # the build's guard: one cluster
            local = LocalModel(np.arange(len(rows)), None, None, None, (0,))
            found: list[tuple[int, ...]] = [tuple(range(len(rows)))]
        else:
            sub = fresh_clusterer(c)
            local, found = sub.fit_local(X[rows]), list(sub.clusters_)
        locals_.append(local)
        found_of.append(found)
        for cid in _columns(local):
            flat.append(frozenset(nodes[rows[r]] for r in found[cid]))
    ids = match_ids(flat, old)
    return RegionFit(list(groups), nodes, X, Y, parts, locals_, found_of, flat, ids, old, pids)


def install_region(al: LayerState, fit: RegionFit, delta: LayerDelta) -> list[int]:
    """Make a region's fit its groups (see the module); return the groups the region now has."""
    c, groups, nodes = al.clusterer, fit.groups, fit.nodes
    upkeep = GroupUpkeep(al)
    for g in groups:
        if al.gmms[g] is not None:
            for p in fit.pids[g]:
                del al.node_at[(g, p)]
    parts = [[nodes[r] for r in rows.tolist()] for rows in fit.parts]
    ids = iter(fit.ids)
    slots = list(groups) + list(range(len(al.gmms), len(al.gmms) + len(parts) - len(groups)))
    made: dict[int, frozenset[str]] = {}
    for j, members in enumerate(parts):
        local, found = fit.locals[j], fit.clusters[j]
        columns = _columns(local)
        cids = [next(ids) for _ in columns]
        group = _fit_of(al, local, found, members, columns, cids)
        upkeep.install(slots[j], group, members, list(range(len(members))), placed=False)
        made.update(group.clusters)
    for g in list(groups)[len(parts) :]:  # the region found fewer groups: these stay empty
        cid = al.ids.take()
        al.gmms[g] = None
        c.local_models_[g] = LocalModel(np.zeros(0, dtype=np.intp), None, None, None, (cid,))
        al.guarded[g] = (cid, set())
    _route(al, list(groups), parts, fit.Y, nodes)
    delta.refitted(fit.old, made, split=False)
    log.info(
        "layer %d: %d nodes of global clusters %s re-clustered: %d groups, %d clusters (%d before)",
        al.layer,
        len(nodes),
        list(groups),
        len(parts),
        len(made),
        len(fit.old),
    )
    return slots[: len(parts)]


def refit_region(
    al: LayerState, groups: Sequence[int], vectors: Vectors, delta: LayerDelta
) -> list[int]:
    """:func:`fit_region` then :func:`install_region`."""
    return install_region(al, fit_region(al, groups, vectors), delta)


def _columns(local: LocalModel) -> list[int]:
    """A local model's cluster ids of its components that hold points."""
    return [cid for cid in local.cluster_ids if cid >= 0]


def _fit_of(
    al: LayerState,
    local: LocalModel,
    found: list[tuple[int, ...]],
    members: list[str],
    columns: list[int],
    cids: list[int],
) -> GroupFit:
    """One part's group model: its local model, its clusters the local step's."""
    if local.gmm is None:  # guarded: one cluster, as the build leaves a small group
        (cid,) = cids
        cid = cid if cid >= 0 else al.ids.take()
        rows = np.arange(len(members))
        return GroupFit(LocalModel(rows, None, None, None, (cid,)), None, {cid: frozenset(members)})
    chosen = np.zeros((len(members), len(columns)), dtype=bool)
    for j, fid in enumerate(columns):
        chosen[list(found[fid]), j] = True
    c = al.clusterer
    return group_fit(
        np.asarray(local.embedding, dtype=np.float64),
        chosen,
        local.umap,
        members,
        list(range(len(members))),
        cids,
        threshold=c.threshold,
        tau_n=al.tau_n,
        tau_c=al.tau_c,
        ids=al.ids,
        random_state=c.random_state,
    )


def _route(
    al: LayerState,
    groups: list[int],
    parts: list[list[str]],
    Y: NDArray[np.float64],
    nodes: list[str],
) -> None:
    """Give each part its component of the global mixture (the M-step of its members in the
    global UMAP space), in the region's groups' places first, then appended."""
    c = al.clusterer
    row = {n: i for i, n in enumerate(nodes)}
    resp = np.zeros((len(nodes), len(parts)))
    for j, members in enumerate(parts):
        resp[[row[n] for n in members], j] = 1.0
    fitted = gaussian_parameters(Y, resp, reg_covar=float(c.global_gmm_.reg_covar))
    old = params_of(c.global_gmm_)
    comps = [int(c.global_components_[g]) for g in groups]
    total = float(old.weights[comps].sum())
    k = len(old.weights)
    extra = max(0, len(parts) - len(groups))
    weights = np.concatenate([old.weights, np.zeros(extra)])
    means = np.concatenate([old.means, np.zeros((extra, *old.means.shape[1:]))])
    covs = np.concatenate([old.covariances, np.zeros((extra, *old.covariances.shape[1:]))])
    targets = comps + list(range(k, k + extra))
    for j in range(len(parts)):
        t = targets[j]
        weights[t] = total * len(parts[j]) / len(nodes)
        means[t], covs[t] = fitted.means[j], fitted.covariances[j]
    for t in comps[len(parts) :]:
        weights[t] = _NO_WEIGHT
    weights = weights / weights.sum()
    c.global_gmm_ = to_sklearn(
        GaussianParams(weights, means, covs),
        reg_covar=float(c.global_gmm_.reg_covar),
        random_state=c.global_gmm_.random_state,
    )
    if extra:
        c.global_components_ = np.concatenate(
            [np.asarray(c.global_components_), np.arange(k, k + extra)]
        ).astype(np.intp)
    al.global_version += 1
