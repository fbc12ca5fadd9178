"""Bounded global clusters: cut a layer's global cluster ("group") in two once it is too large.

RAPTOR's global step chooses its number of clusters by BIC on a fitted sample of at most
``fit_sample`` points, so on a large layer that number stops growing while the layer grows, and
every global cluster grows with the tree (bench/update.py's synthetic trees: 70 global clusters
over 26,635 leaves and over 132,799; median group 310 and 1,348 points, largest 1,164 and
6,338). Everything adRAP does per group an update touches (load its online GMM, place points
through its local UMAP, refit it) then costs in proportion to the tree.

A group past ``max_group`` members is cut in two in the global UMAP space (2-means on its
members), and the global mixture's component for it is replaced by the M-step of each half, so
new points are routed to the halves by the same ``predict_global`` as before. Each half keeps the
group's local UMAP and its clusters restricted to the half (``GroupUpkeep.split``) until its
share of the group's changes makes it due for a refit. The build applies the same rule to its
own global clusters (each part then fitted as a build fits any group), so a tree starts with
bounded groups. RAPTOR's reference
implementation likewise re-clusters a cluster that is too large (in tokens) on its own.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from sklearn.mixture import GaussianMixture

from ingestor.cluster.gmm import GaussianParams, gaussian_parameters, params_of, to_sklearn
from ingestor.cluster.kmeans import kmeans_labels

__all__ = ["DEFAULT_MAX_GROUP", "bound_groups", "split_component"]

#: Largest global cluster before it is cut in two (a constant, so per-group costs do not grow
#: with the layer; 10x the online GMM's full-EM size ``tau_n`` = 100).
DEFAULT_MAX_GROUP = 1000


def split_component(
    gmm: GaussianMixture, comp: int, Y: NDArray[np.floating], *, random_state: int | None
) -> tuple[GaussianMixture, NDArray[np.bool_]]:
    """Replace component ``comp`` of ``gmm`` by two, fitted to the points ``Y`` it holds.

    Args:
        gmm: the fitted global mixture (full covariances) in the space of ``Y``.
        comp: the component to cut.
        Y: (m, c) the component's points (m ≥ 2) in the mixture's space.
        random_state: seed of the 2-means.

    Returns:
        The new mixture (component ``comp`` is the first half, the last component the second;
        the old component's weight is shared by their sizes) and, per row of ``Y``, whether it
        is in the second half. Both halves are non-empty.
    """
    P = np.asarray(Y, dtype=np.float64)
    m = len(P)
    if m < 2:
        raise ValueError(f"cannot cut a global cluster of {m} point(s) in two")
    second = kmeans_labels(P, 2, random_state=random_state).astype(bool)
    if second.all() or not second.any():  # identical points: any cut will do
        second = np.arange(m) >= m // 2
    resp = np.stack([~second, second], axis=1).astype(np.float64)
    halves = gaussian_parameters(P, resp, reg_covar=float(gmm.reg_covar))
    old = params_of(gmm)
    share = old.weights[comp] * resp.sum(axis=0) / m
    weights = np.concatenate([old.weights, share[1:]])
    weights[comp] = share[0]
    params = GaussianParams(
        weights,
        np.concatenate([old.means, halves.means[1:]]),
        np.concatenate([old.covariances, halves.covariances[1:]]),
    )
    params.means[comp] = halves.means[0]
    params.covariances[comp] = halves.covariances[0]
    new = to_sklearn(params, reg_covar=float(gmm.reg_covar), random_state=gmm.random_state)
    return new, second


def bound_groups(
    gmm: GaussianMixture,
    Y: NDArray[np.floating],
    component: NDArray[np.intp],
    max_group: int,
    *,
    random_state: int | None,
) -> tuple[GaussianMixture, NDArray[np.intp]]:
    """Cut every component holding more than ``max_group`` of the points ``Y`` until none does.

    Args:
        gmm: the fitted global mixture.
        Y: (n, c) every point of the layer in the mixture's space.
        component: (n,) each point's component (``gmm.predict(Y)``).
        max_group: the most points a component may hold.
        random_state: seed of the cuts.

    Returns:
        The mixture with the new components appended, and the points' components in it.
    """
    if max_group < 2:
        raise ValueError(f"max_group={max_group!r} must be at least 2")
    component = np.array(component, dtype=np.intp)
    while True:
        counts = np.bincount(component, minlength=gmm.n_components)
        comp = int(np.argmax(counts))
        if counts[comp] <= max_group:
            return gmm, component
        members = np.flatnonzero(component == comp)
        gmm, second = split_component(gmm, comp, Y[members], random_state=random_state)
        component[members[second]] = gmm.n_components - 1
