"""The pieces an :class:`~ingestor.cluster.online_gmm.OnlineGMM` updates one point at a time.

Equation 3 of [A §4.3] (the incremental M-step, in its exact form), the growable point buffer with
stable ids, the per-layer cluster id counter, the result every update reports, and what a batch of
them did to one layer (:class:`LayerDelta`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.em import bic, fit_from_kmeans, fit_gmm, run_em
from ingestor.cluster.gmm import (
    EM,
    REG_COVAR,
    GaussianParams,
    gaussian_parameters,
    params_of,
    precision_cholesky,
    responsibilities,
)
from ingestor.cluster.points import IdCounter as IdCounter  # stored layers name it here
from ingestor.cluster.points import PointBuffer as PointBuffer  # (pickles)

#: Point id of a node in a global cluster too small for a local UMAP + GMM ("guarded").
GUARDED = -1

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


#: ``vectors(node_ids)``: the (n, d) matrix of the nodes' embeddings (``TreeState.matrix``).
Vectors = Callable[[list[str]], NDArray[np.float32]]


@dataclass
class LayerDelta:
    """One batch of operations on one layer: the cluster ids it touched, and what its removals
    leave for its placements (``AdaptiveLayer.remove`` then ``add_many`` with the same delta).

    Attributes:
        dirty, created, split, removed: the clusters whose summary must be regenerated, that
            appeared, that were split, that are gone.
        touched: global groups that lost a point (``add_many`` checks whether they need a refit).
        moving: node → (its group, its clusters) for nodes removed to be placed again (a
            rewritten summary): one changed point of their group, not two.
    """

    dirty: set[int] = field(default_factory=set)
    created: set[int] = field(default_factory=set)
    split: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)
    touched: set[int] = field(default_factory=set)
    moving: dict[str, tuple[int, frozenset[int]]] = field(default_factory=dict)

    def take_removals(self) -> tuple[set[int], dict[str, tuple[int, frozenset[int]]]]:
        """Return what this batch's removals left for its placements (``touched``, ``moving``)
        and clear it: a delta reused for another batch starts afresh."""
        taken = self.touched, self.moving
        self.touched, self.moving = set(), {}
        return taken

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


def prefetch(mapping: object, keys: Iterable[Any]) -> None:
    """Ask a lazily stored mapping to read ``keys`` in one query (a plain dict needs nothing)."""
    fetch = getattr(mapping, "prefetch", None)
    if fetch is not None:
        fetch(keys)


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
