"""The update of an online GMM's mixture: Equation 3 of [A §4.3] and Algorithm 2's refit.

A point past τ_n moves every component it reaches by :func:`incremental_m_step` (the incremental
M-step in its exact form); while n ≤ τ_n the mixture is refitted on all its points
(:func:`refit_by_bic`), and the refitted clusters inherit the ids of the clusters they overlap
most (:func:`inherited_ids`, :func:`match_ids`). Every update reports what it did to the clusters
(:class:`UpdateResult`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.em import bic, fit_gmm, run_em
from ingestor.cluster.gmm import (
    REG_COVAR,
    GaussianParams,
    params_of,
    precision_cholesky,
    responsibilities,
)

__all__ = [
    "UNREACHED",
    "UpdateResult",
    "incremental_m_step",
    "inherited_ids",
    "match_ids",
    "refit_by_bic",
]

#: A new point's responsibility below which :func:`incremental_m_step` leaves a component's mean
#: and covariance as they are (they would move by less than 1e-12 of themselves).
UNREACHED = 1e-12


@dataclass(frozen=True)
class UpdateResult:
    """What one ``add`` or ``remove`` did to the clustering.

    Attributes:
        point: id of the point added or removed.
        assigned: clusters the added point belongs to after the update (empty for a removal).
        changed: clusters that existed before and still exist, with a different member set
            (this includes the part of a split cluster that kept its id).
        created: clusters that did not exist before.
        split: clusters that were split (their id kept one part; the others are in ``created``).
        removed: clusters that no longer exist.
        refit: True when the full-EM branch (n ≤ τ_n) ran.
    """

    point: int
    assigned: frozenset[int] = frozenset()
    changed: frozenset[int] = frozenset()
    created: frozenset[int] = frozenset()
    split: frozenset[int] = frozenset()
    removed: frozenset[int] = frozenset()
    refit: bool = False

    @property
    def dirty(self) -> frozenset[int]:
        """Clusters whose summary must be regenerated (changed or created)."""
        return self.changed | self.created

    @classmethod
    def diff(
        cls,
        members: Mapping[int, set[int]],
        pid: int,
        old_ids: frozenset[int],
        before: Mapping[int, frozenset[int]],
        *,
        split: set[int] | None = None,
        refit: bool = False,
        assigned: bool = True,
        near: Sequence[int] | None = None,
    ) -> UpdateResult:
        """The result of an update of point ``pid`` that left clusters ``members`` (cluster id →
        point ids): a diff against ``before`` (the old members of every cluster it may have
        touched) and ``old_ids`` (the clusters before it). ``near``: the only clusters the point
        can be in (None: any, a look at every cluster; none when not ``assigned``)."""
        near = (list(members) if assigned else []) if near is None else near
        return cls(
            point=pid,
            assigned=frozenset(c for c in near if pid in members.get(c, ())),
            changed=frozenset(c for c, m in before.items() if c in members and members[c] != m),
            created=frozenset(members.keys() - old_ids),
            split=frozenset(split or ()),
            removed=frozenset(old_ids - members.keys()),
            refit=refit,
        )


def incremental_m_step(
    params: GaussianParams,
    n: float,
    x: NDArray[np.floating],
    gamma: NDArray[np.floating],
    reg_covar: float = REG_COVAR,
) -> GaussianParams:
    """Equation 3: add one point's contribution to every component.

    With N_k = n π_k and N'_k = N_k + g_k: μ'_k = (N_k μ_k + g_k x) / N'_k,
    Σ'_k = (N_k (Σ_k - rI) + g_k (N_k / N'_k) (x - μ_k)(x - μ_k)ᵀ) / N'_k + rI,
    π'_k = N'_k / (n + 1). This equals the M-step of Equation 2 on the n + 1 points when the
    old points' responsibilities are held fixed.

    Args:
        params: current parameters (k components, d dims).
        n: number of points the parameters were estimated on.
        x: (d,) the new point.
        gamma: (k,) its responsibilities.
        reg_covar: the regularisation included in ``params.covariances``.

    Returns:
        The updated parameters.
    """
    x = np.asarray(x, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    nk = n * params.weights
    nk_new = nk + g
    # Components the point does not reach (gamma below UNREACHED: a change of their mean and
    # covariance far below reg_covar) keep theirs exactly, and with them their precisions.
    moved = np.flatnonzero(g >= UNREACHED)
    means, covariances = params.means.copy(), params.covariances.copy()
    gm, nm, nm_new = g[moved], nk[moved], nk_new[moved]
    diff = x[None, :] - params.means[moved]  # around the old means
    means[moved] = (nm[:, None] * params.means[moved] + gm[:, None] * x[None, :]) / nm_new[:, None]
    eye = np.eye(len(x))
    scatter = nm[:, None, None] * (params.covariances[moved] - reg_covar * eye)
    scatter += (gm * nm / nm_new)[:, None, None] * (diff[:, :, None] * diff[:, None, :])
    covariances[moved] = scatter / nm_new[:, None, None] + reg_covar * eye
    out = GaussianParams(nk_new / (n + 1), means, covariances)
    cached = params.known_precisions
    if cached is not None:
        prec = cached.copy()
        prec[moved] = precision_cholesky(covariances[moved])
        out.with_precisions(prec)
    return out


def refit_by_bic(
    X: NDArray[np.float64],
    params: GaussianParams,
    assign: Callable[[NDArray[np.float64]], list[frozenset[int]]],
    *,
    tau_c: int,
    reg_covar: float,
    random_state: int | None,
    max_iter: int,
) -> GaussianParams:
    """Algorithm 2 while n ≤ τ_n: EM to convergence from ``params`` on all points ``X``; with c
    the number of its clusters past ``tau_c`` members (``assign`` turns posteriors into
    memberships), fresh fits with K + 1 .. K + c components compete with it by BIC. Returns the
    winner's parameters."""
    best = params_of(run_em(X, params, reg_covar=reg_covar, max_iter=max_iter))
    comps = assign(responsibilities(X, best)[1])
    sizes = np.bincount([c for cs in comps for c in cs], minlength=best.k)
    c = int((sizes > tau_c).sum())
    best_bic = bic(X, best)
    for k in range(best.k + 1, min(best.k + c, len(X)) + 1):
        fresh = params_of(fit_gmm(X, k, random_state=random_state, max_iter=max_iter))
        score = bic(X, fresh)
        if score < best_bic:
            best, best_bic = fresh, score
    return best


def match_ids(
    new: Sequence[frozenset[Any]],
    old: Mapping[int, frozenset[Any]] | Mapping[int, set[Any]],
    *,
    order: Sequence[int] | None = None,
) -> list[int]:
    """Give each new cluster the id of the old cluster it shares most members with (-1: none).

    An optimal one-to-one matching on the overlap counts (Hungarian), so an old cluster names at
    most one new cluster and a new cluster without any shared member gets no old id. ``order``:
    the old ids in the order ties are broken by (default: sorted).
    """
    old_ids = list(order) if order is not None else sorted(old)
    overlap = np.array([[len(part & old[cid]) for cid in old_ids] for part in new], dtype=float)
    ids = [-1] * len(new)
    if overlap.size == 0:
        return ids
    from scipy.optimize import linear_sum_assignment  # ~0.8 s to import: when used

    rows, cols = linear_sum_assignment(-overlap)
    for r, c in zip(rows, cols, strict=True):
        if overlap[r, c] > 0:
            ids[r] = old_ids[c]
    return ids


def inherited_ids(
    k: int,
    pids: Sequence[int],
    comps: Sequence[frozenset[int]],
    members: Mapping[int, set[int]],
) -> list[int]:
    """The id each of ``k`` refitted components inherits (:func:`match_ids`, ties broken in the
    order of ``members``): points ``pids`` now in components ``comps``, clusters before
    ``members``."""
    parts = [frozenset(p for p, cs in zip(pids, comps, strict=True) if j in cs) for j in range(k)]
    return match_ids(parts, members, order=list(members))
