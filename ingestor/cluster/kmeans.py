"""k-means labels for initialising a Gaussian mixture (as scikit-learn does), in compact numpy."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


def kmeans_labels(
    Y: NDArray[np.floating], k: int, *, random_state: int | None, max_iter: int = 100
) -> NDArray[np.intp]:
    """Return (n,) k-means labels: greedy k-means++ seeding, then Lloyd iterations.

    scikit-learn initialises a GMM from ``KMeans(n_init=1)``, the same algorithm; its per-call
    overhead (validation, thread-pool inspection) was 2-3 ms, more than the EM it initialises
    on the small sets a tree layer produces, so this is a compact numpy version.

    Args:
        Y: (n, d) points, n ≥ k.
        k: number of clusters.
        random_state: seed of the seeding.
        max_iter: Lloyd iterations at most (stops earlier when no label changes).

    Returns:
        The label of each point, in [0, k).
    """
    P = np.asarray(Y, dtype=np.float64)
    n = len(P)
    if k <= 1:
        return np.zeros(n, dtype=np.intp)
    rng = np.random.default_rng(random_state)
    sq = np.einsum("ij,ij->i", P, P)

    def sq_dist(centers: Array) -> Array:  # (len(centers), n), clipped at 0 against rounding
        d2 = sq[None, :] - 2.0 * (centers @ P.T) + np.einsum("ij,ij->i", centers, centers)[:, None]
        return np.asarray(np.maximum(d2, 0.0))

    # Greedy k-means++ (as scikit-learn): of 2 + ln k candidates drawn ∝ D², keep the one that
    # lowers the potential most.
    chosen = [int(rng.integers(n))]
    closest = sq_dist(P[chosen])[0]
    trials = 2 + int(np.log(k))
    for _ in range(1, k):
        total = closest.sum()
        if total <= 0.0:  # every point coincides with a centre (duplicates): any point will do
            candidates = rng.integers(n, size=trials)
        else:
            candidates = np.searchsorted(np.cumsum(closest), rng.random(trials) * total)
            candidates = np.minimum(candidates, n - 1)
        d2 = np.minimum(closest[None, :], sq_dist(P[candidates]))
        best = int(np.argmin(d2.sum(axis=1)))
        chosen.append(int(candidates[best]))
        closest = d2[best]
    centers = P[chosen].copy()
    labels = np.full(n, -1, dtype=np.intp)
    for _ in range(max_iter):
        new = np.argmin(sq_dist(centers), axis=0)
        if np.array_equal(new, labels):
            break
        labels = new
        counts = np.bincount(labels, minlength=k)
        sums = np.zeros_like(centers)
        np.add.at(sums, labels, P)
        filled = counts > 0  # an emptied cluster keeps its centre
        centers[filled] = sums[filled] / counts[filled, None]
    return labels
