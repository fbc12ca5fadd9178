"""The split of an online GMM's cluster: Algorithm 2's offer by BIC, or a cut in two.

A cluster past τ_c is offered a split into k' = 1, 2, 3 components by BIC on its own points
(:func:`best_split`), again after each quarter of growth (:func:`offer_due`); a cluster that
outgrew its group's fit is cut in two at the median of its principal axis (:func:`halve`). The
winner replaces the cluster's component in the mixture (:func:`replace_component`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.em import fit_from_kmeans
from ingestor.cluster.gmm import (
    EM,
    REG_COVAR,
    GaussianParams,
    gaussian_parameters,
    responsibilities,
)

__all__ = [
    "REOFFER_GROWTH",
    "best_split",
    "halve",
    "offer_due",
    "replace_component",
    "split_offer",
]

#: A cluster offered its split at s members is offered it again past s x (1 + this) members.
REOFFER_GROWTH = 0.25


def offer_due(size: int, tau_c: int, offered: int) -> bool:
    """Whether a cluster of ``size`` members, last offered its split at ``offered`` members (0:
    never), is due an offer: past ``tau_c``, and either not offered since it passed ``tau_c`` or
    grown past ``offered x (1 +`` :data:`REOFFER_GROWTH`\\ ``)``."""
    return size > tau_c and (offered <= tau_c or size > offered * (1.0 + REOFFER_GROWTH))


def best_split(
    X: NDArray[np.float64],
    pids: Sequence[int],
    assign: Callable[[NDArray[np.float64]], list[frozenset[int]]],
    *,
    random_state: int | None,
    max_iter: int,
    min_size: int,
) -> tuple[GaussianParams, list[set[int]]] | None:
    """Algorithm 2's split offer: mixtures of k' = 1, 2, 3 components on one cluster's points
    ``X`` (point ids ``pids``), compared by BIC; ``assign`` turns posteriors into memberships.

    A candidate whose parts would hold fewer than ``min_size`` members is passed over (a
    full-covariance component fitted to one point has an unbounded likelihood). Returns the
    winner's k' components and the point ids of each part, or None if k' = 1 wins.
    """
    candidates = []
    X = np.asarray(X, dtype=np.float64)
    em = EM(X, REG_COVAR)  # the points' products, once for the three fits and their BICs
    for k in (1, 2, 3):
        sub = fit_from_kmeans(em, X, k, random_state, max_iter).params
        mean_log_lik, resp = em.e_step(sub)
        parts = _members(resp, pids, assign)
        if k == 1 or min(len(p) for p in parts) >= min_size:
            candidates.append((em.bic_of(mean_log_lik, sub), k, sub, parts))
    _, k, sub, parts = min(candidates, key=lambda c: (c[0], c[1]))
    return None if k == 1 else (sub, parts)


def split_offer(
    X: NDArray[np.float64],
    pids: Sequence[int],
    assign: Callable[[NDArray[np.float64]], list[frozenset[int]]],
    *,
    cut: bool,
    min_size: int,
    reg_covar: float,
    random_state: int | None,
    max_iter: int,
) -> tuple[GaussianParams, list[set[int]]] | None:
    """A cluster's split: :func:`halve` with ``cut``, else Algorithm 2's offer (:func:`best_split`)."""
    if cut:
        return halve(X, pids, assign, min_size=min_size, reg_covar=reg_covar)
    return best_split(
        X, pids, assign, random_state=random_state, max_iter=max_iter, min_size=min_size
    )


def halve(
    X: NDArray[np.float64],
    pids: Sequence[int],
    assign: Callable[[NDArray[np.float64]], list[frozenset[int]]],
    *,
    min_size: int,
    reg_covar: float,
) -> tuple[GaussianParams, list[set[int]]] | None:
    """Cut one cluster's points ``X`` in two at the median of their principal axis (Boley's
    principal direction divisive partitioning), one M-step on the halves. Not EM or 2-means:
    on ~13 points in 10 dims they settle on a part of one outlier (1 + 12 members); not BIC,
    which prefers one component there. Returns the two components and each part's point ids
    (memberships by ``assign`` on their posteriors), or None if a part would hold fewer than
    ``min_size`` members."""
    centred = X - X.mean(axis=0)
    axis = np.linalg.svd(centred, full_matrices=False)[2][0]
    side = (centred @ axis > np.median(centred @ axis)).astype(np.intp)
    if side.min() == side.max():  # every point projects to the median: duplicates
        return None
    sub = gaussian_parameters(X, np.eye(2)[side], reg_covar)
    parts = _parts(X, sub, pids, assign)
    return (sub, parts) if min(len(p) for p in parts) >= min_size else None


def _parts(
    X: NDArray[np.float64],
    sub: GaussianParams,
    pids: Sequence[int],
    assign: Callable[[NDArray[np.float64]], list[frozenset[int]]],
) -> list[set[int]]:
    return _members(responsibilities(X, sub)[1], pids, assign)


def _members(
    resp: NDArray[np.float64],
    pids: Sequence[int],
    assign: Callable[[NDArray[np.float64]], list[frozenset[int]]],
) -> list[set[int]]:
    parts: list[set[int]] = [set() for _ in range(resp.shape[1])]
    for pid, cs in zip(pids, assign(resp), strict=True):
        for j in cs:
            parts[j].add(pid)
    return parts


def replace_component(
    params: GaussianParams, comp: int, parts: GaussianParams, order: Sequence[int]
) -> GaussianParams:
    """Component ``comp`` of ``params`` replaced by the components ``order`` of ``parts`` (a
    mixture fitted to its points, sharing its weight), appended after the other components."""
    rest = [j for j in range(params.k) if j != comp]
    return GaussianParams(
        np.concatenate([params.weights[rest], parts.weights[list(order)] * params.weights[comp]]),
        np.concatenate([params.means[rest], parts.means[list(order)]]),
        np.concatenate([params.covariances[rest], parts.covariances[list(order)]]),
    )
