"""Re-fit one global cluster's local model on its current members: adRAP's bounded local refit.

adRAP keeps a layer's global clustering and, inside each global cluster ("group"), the local UMAP
fitted at build time; new nodes are placed through that UMAP's ``transform`` and the online GMM
(Algorithm 2). Once most of a group's members have been added or removed since its local model
was fitted, that UMAP describes points that are gone: measured on the soak (1,500 operations,
bench/soak.py), the 155 members of one group were transformed into one blob (a fresh BIC fit in
that space chose one component) while the online GMM, whose full-EM refits only ever add
components, held 67 clusters there; layer-1 ARI against a rebuild was 0.13, and 0.43 with every
group's local UMAP + GMM fitted afresh (a rebuild with another seed: 0.54).

:func:`refit_group` runs the build's clustering (``TreeClusterer``: its local step, or both steps
for a group that grew well past the build's groups) on one group's current members, so its cost
is that of the group, never of the tree. The paper allows it for
deletions ("recompute the local clustering by trying smaller values for K" [A §4.4]); here it also
covers insertions, triggered by how much of the group changed
(:class:`~ingestor.cluster.adaptive.AdaptiveLayer`). New clusters take the ids of the old clusters
they overlap most (optimal matching), so a cluster the refit leaves as it was keeps its id and its
summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.gmm import REG_COVAR, gaussian_parameters, to_sklearn
from ingestor.cluster.online_gmm import IdCounter, OnlineGMM, match_ids
from ingestor.cluster.two_step import LocalModel

__all__ = ["GroupFit", "fresh_clusterer", "group_fit", "match_ids", "refit_group", "two_steps"]

#: A group refit runs the build's two steps past this many times the build's mean group size.
TWO_STEPS_PAST = 2.0

#: The clusterer parameters a group's own clusterer copies from its layer's.
_PARAMS = (
    "n_components",
    "threshold",
    "max_clusters",
    "local_n_neighbors",
    "metric",
    "random_state",
    "fit_sample",
    "max_iter",
    "n_epochs",
    "exhaustive_bic",
    "max_group",
    "max_cluster_size",
)


@dataclass
class GroupFit:
    """A group's new local model.

    Attributes:
        local: the clusterer's record of it (``TreeClusterer.local_models_[g]``).
        online: its online GMM over the members (point ids as given), or None when the group is
            too small for a local UMAP (then it is one cluster, "guarded", as in a build).
        clusters: cluster id → member node ids.
    """

    local: LocalModel
    online: OnlineGMM | None
    clusters: dict[int, frozenset[str]]


def refit_group(
    clusterer: Any,
    nodes: Sequence[str],
    X: NDArray[np.float32],
    old: Mapping[int, frozenset[str]],
    *,
    point_ids: Sequence[int],
    ids: IdCounter,
    tau_n: int,
    tau_c: int,
) -> GroupFit:
    """Cluster one group's members as a build would, for its new local model.

    A group of about the size the layer's build gave its global clusters (at most
    :data:`TWO_STEPS_PAST` times their mean, :func:`two_steps`) gets the build's local step: a
    local UMAP and a GMM by BIC with at least ``⌈m / max_cluster_size⌉`` components, as the build
    clustered it. A group that grew past that runs the build's two steps (a UMAP with √m
    neighbours and a GMM by BIC, then a local UMAP + GMM inside each part): grown from stale
    global placements, it can hold several of a rebuild's global clusters, which one local step
    would keep together (short soak: layer-1 clusters of 66 members against a rebuild's 27 at
    most). Running the two steps on every group made a refit 3-4x dearer at 265k leaves (~4.1 s
    against ~1.1 s for 990 points) and its clusters 3-4x finer than the build's there (120-166
    clusters against the 42 the build and a local-step refit make), so each refit of a large
    group created ~100 summaries. The group's online GMM lives in the UMAP space of the step that
    ran first, its components the M-step of the clusters found.

    Args:
        clusterer: the layer's fitted ``TreeClusterer`` (a fresh one with its parameters runs).
        nodes: the group's member node ids (at least one).
        X: (len(nodes), d) their embeddings.
        old: the group's clusters before the refit (cluster id → member node ids).
        point_ids: the point id each node gets in the new online GMM.
        ids: the layer's cluster id counter (fresh ids for clusters no old one matches).
        tau_n, tau_c: Algorithm 2's thresholds for the new online GMM.

    Returns:
        The new local model, its online GMM (None when the group has at most
        ``n_components + 1`` members: one cluster, as the build guards it) and its clusters.
    """
    c = clusterer
    m = len(nodes)
    if m == 0:
        raise ValueError("refit_group needs at least one member; an empty group has no model")
    rows = np.arange(m)
    if m <= c.n_components + 1:  # the build's guard: too few to reduce, one cluster
        (cid,) = match_ids([frozenset(nodes)], old)
        cid = cid if cid >= 0 else ids.take()
        return GroupFit(LocalModel(rows, None, None, None, (cid,)), None, {cid: frozenset(nodes)})
    sub = type(c)(**{k: getattr(c, k) for k in _PARAMS})
    if two_steps(c, m):
        sub.fit(X)
        umap = sub.global_umap_
        Y = umap.embedding_ if m <= sub.fit_sample else sub.transform_global(X)
    else:
        local = sub.fit_local(X)
        umap, Y = local.umap, local.embedding
    Y = np.asarray(Y, dtype=np.float64)
    chosen = np.zeros((m, len(sub.clusters_)), dtype=bool)
    for j, members in enumerate(sub.clusters_):
        chosen[list(members), j] = True
    parts = [frozenset(nodes[i] for i in np.flatnonzero(col).tolist()) for col in chosen.T]
    return group_fit(
        Y,
        chosen,
        umap,
        nodes,
        list(point_ids),
        match_ids(parts, old),
        threshold=c.threshold,
        tau_n=tau_n,
        tau_c=tau_c,
        ids=ids,
        random_state=c.random_state,
    )


def fresh_clusterer(clusterer: Any) -> Any:
    """An unfitted clusterer with the parameters of a layer's fitted one."""
    return type(clusterer)(**{k: getattr(clusterer, k) for k in _PARAMS})


def two_steps(clusterer: Any, m: int) -> bool:
    """Whether a refit of a group of ``m`` points runs the build's two steps, not only its local
    step: the group holds more than :data:`TWO_STEPS_PAST` times the points the layer's build put
    in a global cluster on average (or that is not recorded)."""
    size = clusterer.build_group_size()
    return size is None or m > TWO_STEPS_PAST * size


def group_fit(
    Y: NDArray[Any],
    chosen: NDArray[np.bool_],
    umap: Any,
    nodes: Sequence[str],
    point_ids: list[int],
    cluster_ids: list[int],
    *,
    reg_covar: float = REG_COVAR,
    **online: Any,
) -> GroupFit:
    """A group's model whose clusters are the columns of ``chosen``.

    Args:
        Y: (m, c) the members' points in the space of ``umap`` (the group's local UMAP).
        chosen: (m, k) which clusters each member belongs to (rows in ``nodes`` order).
        nodes, point_ids: the members and their point ids in the online GMM.
        cluster_ids: each column's cluster id (-1: a fresh one from ``online["ids"]``).
        reg_covar: covariance regularisation of the components.
        online: the online GMM's other arguments (thresholds, id counter, seed...).

    The online GMM's components are the M-step of the clusters (a soft member counts for each of
    its clusters); a column without members makes no cluster.
    """
    params = gaussian_parameters(Y, chosen / chosen.sum(axis=1, keepdims=True), reg_covar)
    gmm = to_sklearn(params, reg_covar=reg_covar, random_state=online.get("random_state"))
    model = OnlineGMM(
        params,
        Y,
        cluster_ids=cluster_ids,
        point_ids=point_ids,
        memberships=[set(np.flatnonzero(row).tolist()) for row in chosen],
        reg_covar=reg_covar,
        **online,
    )
    comp_ids = [-1] * gmm.n_components  # per GMM component, as TreeClusterer records them
    kept = [j for j in range(gmm.n_components) if chosen[:, j].any()]
    for j, cid in zip(kept, model.cluster_ids, strict=True):
        comp_ids[j] = cid
    node_of = dict(zip(point_ids, nodes, strict=True))
    clusters = {cid: frozenset(node_of[p] for p in pids) for cid, pids in model.members.items()}
    local = LocalModel(np.arange(len(nodes)), umap, gmm, Y, tuple(comp_ids))
    return GroupFit(local, model, clusters)
