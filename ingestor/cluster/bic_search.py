"""Choose a mixture's number of components k by BIC, cheaply [R §3, A §3.3].

:func:`select_gmm_by_bic` searches a geometric grid of k, then narrows the bracket around the
best grid point (a discrete ternary search): a third of the fits of the exhaustive scan, with the
same k in 56 of 59 local and 4 of 5 global clusterings measured (and a BIC within 30 of the
minimum otherwise, on BIC values of -700 and -28,000). BLAS and OpenMP are limited to one
thread: the matrices are tiny (n x 10), and on the 2-core machines this runs on, thread start-up
and oversubscription made each fit 3-15x slower.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.mixture import GaussianMixture

from ingestor.cluster.em import fit_from_kmeans
from ingestor.cluster.gmm import EM, REG_COVAR, TOL, Array, EMFit
from ingestor.cluster.threads import one_thread

log = logging.getLogger(__name__)

#: Ratio between consecutive k of the coarse grid (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 19, 24, ...).
GRID_RATIO = 1.25


def bic_k_max(n: int, max_clusters: int) -> int:
    """Return the largest number of components tried for ``n`` points.

    The adRAP paper evaluates k = 1..max(50, √n) [A §3.3] (``max_clusters`` plays the role of its
    50). We also cap k at n // 2, so that a component holds two points on average: on 59 local
    clusterings of UMAP embeddings (13-1,000 points) the exhaustive BIC minimum was never above
    0.38·n, while the fits with k > n/2 were the slowest and always among the worst.

    Args:
        n: number of points the mixture is fitted on (≥ 1).
        max_clusters: the paper's 50.

    Returns:
        ``min(max(max_clusters, ⌊√n⌋), n // 2)``, at least 1.
    """
    return max(1, min(max(max_clusters, math.isqrt(n)), n // 2))


def select_gmm_by_bic(
    Y: NDArray[np.floating],
    k_max: int,
    *,
    random_state: int | None,
    max_iter: int = 100,
    exhaustive: bool = False,
    k_min: int = 1,
    mapper: Mapper | None = None,
) -> GaussianMixture:
    """Return the mixture with the lowest BIC over k = k_min..k_max.

    Args:
        Y: (n, c) points.
        k_max: largest k tried (see :func:`bic_k_max`); clipped to n.
        random_state: seed of every fit.
        max_iter: EM iterations per fit.
        exhaustive: fit every k (RAPTOR's reference behaviour) instead of the coarse-to-fine search.
        k_min: smallest k tried (clipped to [1, k_max]): a bound on the mean cluster size.
        mapper: ``mapper(fn, tasks) -> [fn(t) for t in tasks]``, on worker processes (a build's
            global step): the fits the search needs at once (the coarse grid, each round's two
            probes) are made there, the largest k first. Each fit is a pure function of the
            points, k and the seed: the same mixture with or without.

    Returns:
        The fitted ``GaussianMixture`` with the lowest BIC among the k evaluated (ties: smaller k).
    """
    points = np.asarray(Y, dtype=np.float64)
    k_max = max(1, min(k_max, len(points)))
    k_min = max(1, min(k_min, k_max))
    search = _BicSearch(points, random_state=random_state, max_iter=max_iter, mapper=mapper)
    with one_thread():
        if exhaustive:
            search.prefetch(range(k_min, k_max + 1))
            for k in range(k_min, k_max + 1):
                search.bic(k)
        else:  # the search runs on 1..(k_max - k_min + 1), shifted
            _coarse_to_fine(
                lambda j: search.bic(j + k_min - 1),
                k_max - k_min + 1,
                prefetch=lambda js: search.prefetch([j + k_min - 1 for j in js]),
            )
    return search.best()


#: Runs a module-level function over tasks, results in task order (a build's worker pool).
Mapper = Callable[[Callable[[Any], Any], list[Any]], list[Any]]


def _fit_k(task: tuple[Array, int, int | None, int]) -> tuple[float, EMFit | None]:
    """The BIC and fit of ``k`` components on ``Y`` (inf, None: a singular covariance), for
    ``task = (Y, k, random_state, max_iter)``: a worker's task."""
    Y, k, random_state, max_iter = task
    with one_thread():
        return _fit(EM(Y, REG_COVAR), Y, k, random_state, max_iter)


def _fit(
    em: EM, Y: Array, k: int, random_state: int | None, max_iter: int
) -> tuple[float, EMFit | None]:
    try:
        fit = fit_from_kmeans(em, Y, k, random_state, max_iter)
    except np.linalg.LinAlgError:
        # A component collapsed onto identical points: this k is simply not a candidate.
        log.debug("GMM with k=%d failed on %d points: singular covariance", k, len(Y))
        return float("inf"), None
    return em.bic(fit.params), fit


class _BicSearch:
    """Memoised BIC of a k-component fit on fixed points (inf: the fit failed)."""

    def __init__(
        self, Y: Array, *, random_state: int | None, max_iter: int, mapper: Mapper | None = None
    ) -> None:
        self.Y = Y
        self.em = EM(Y, REG_COVAR)
        self.random_state = random_state
        self.max_iter = max_iter
        self.mapper = mapper
        self.fits: dict[int, tuple[float, EMFit | None]] = {}

    def bic(self, k: int) -> float:
        if k not in self.fits:
            self.fits[k] = _fit(self.em, self.Y, k, self.random_state, self.max_iter)
        return self.fits[k][0]

    def prefetch(self, ks: Iterable[int]) -> None:
        """Fit the ``ks`` not fitted yet at once through the mapper (the largest k first: the
        slowest), if there is one and two fits or more to make."""
        todo = sorted({k for k in ks if k not in self.fits}, reverse=True)
        if self.mapper is None or len(todo) < 2:
            return
        tasks = [(self.Y, k, self.random_state, self.max_iter) for k in todo]
        for k, result in zip(todo, self.mapper(_fit_k, tasks), strict=True):
            self.fits[k] = result

    def best(self) -> GaussianMixture:
        fitted = {k: fit for k, (bic, fit) in self.fits.items() if fit is not None}
        k = min(fitted, key=lambda k: (self.fits[k][0], k))
        log.debug("BIC chose k=%d of %d evaluated (n=%d)", k, len(self.fits), len(self.Y))
        return fitted[k].to_sklearn(max_iter=self.max_iter, tol=TOL, random_state=self.random_state)


def _grid(k_max: int) -> list[int]:
    ks = {1, k_max}
    x = 1.0
    while x < k_max:
        ks.add(min(k_max, round(x)))
        x = max(x * GRID_RATIO, x + 1)
    return sorted(ks)


def _coarse_to_fine(
    bic: Callable[[int], float],
    k_max: int,
    prefetch: Callable[[list[int]], None] | None = None,
) -> None:
    """Evaluate ``bic`` on a geometric grid, then narrow the bracket around the best grid point.

    The refinement is a discrete ternary search on the bracket (lo, best, hi): probe the midpoint
    of each half, move to a strictly better probe or shrink both halves around ``best``. Each
    round halves the bracket, so a grid gap of g costs about 2·log2(g) extra fits. ``prefetch``
    is given the k each step needs at once (the grid, a round's probes) before ``bic`` is asked.
    """
    grid = _grid(k_max)
    if prefetch is not None:
        prefetch(grid)
    i = min(range(len(grid)), key=lambda j: (bic(grid[j]), grid[j]))
    lo, best, hi = grid[max(i - 1, 0)], grid[i], grid[min(i + 1, len(grid) - 1)]
    inf = float("inf")
    while True:
        left, right = (lo + best) // 2, (best + hi + 1) // 2
        has_left, has_right = lo < left < best, best < right < hi
        if not (has_left or has_right):
            return
        if prefetch is not None:
            prefetch([k for k, has in ((left, has_left), (right, has_right)) if has])
        f_left = bic(left) if has_left else inf
        f_right = bic(right) if has_right else inf
        f_best = bic(best)
        if f_left < f_best and f_left <= f_right:
            lo, best, hi = lo, left, best
        elif f_right < f_best:
            lo, best, hi = best, right, hi
        else:
            lo = left if has_left else lo
            hi = right if has_right else hi
