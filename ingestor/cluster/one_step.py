"""One-step (local only) clustering for postQFRAP [A §5]: UMAP, then a GMM whose k minimises BIC.

postQFRAP clusters the k0 nodes retrieved for one question. Retrieval already acted as the global
filter, so the paper skips RAPTOR's global step and treats the k0 nodes as one global cluster
(its Appendix B: same context quality as two-step). This is the local step of
:class:`~ingestor.cluster.two_step.TreeClusterer` on all points, fitted once and thrown away (no
``transform`` is ever needed, nothing is stored).

Small-n guards (RAPTOR's): n ≤ n_components + 1 → one cluster; UMAP's n_neighbors < n and its
output dimensions < n - 1 (spectral init); the BIC search tries k ≤ n // 2.
"""

from __future__ import annotations

import logging

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.bic_search import bic_k_max, select_gmm_by_bic
from ingestor.cluster.gmm import soft_assign
from ingestor.cluster.umap_reduce import fit_umap, unit_rows

log = logging.getLogger(__name__)

__all__ = ["cluster_one_step"]


def cluster_one_step(
    X: NDArray[np.floating],
    *,
    n_components: int = 10,
    n_neighbors: int = 10,
    threshold: float = 0.1,
    max_clusters: int = 50,
    random_state: int | None = 0,
    n_epochs: int = 200,
) -> list[tuple[int, ...]]:
    """Cluster the rows of X with one local UMAP + GMM-by-BIC, soft assignment.

    Args:
        X: (n, d) embeddings (rows are L2-normalised defensively), n ≥ 1.
        n_components: UMAP output dimensions (the papers' 10).
        n_neighbors: UMAP n_neighbors of the local step (the papers' 10).
        threshold: a point joins every cluster whose posterior exceeds it (and its argmax one).
        max_clusters: see :func:`~ingestor.cluster.bic_search.bic_k_max`.
        random_state: seed of UMAP and the GMM fits; None is parallel and not reproducible.
        n_epochs: UMAP layout epochs.

    Returns:
        The clusters, each a sorted tuple of row indices; every row is in at least one cluster,
        no cluster is empty. Clusters are ordered by their smallest member.

    Raises:
        ValueError: X is empty, not 2-D or not finite, or ``threshold`` is outside (0, 1).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold={threshold!r} must be in (0, 1)")
    X = unit_rows(X)
    n = len(X)
    if n <= n_components + 1:  # too few points to reduce (RAPTOR's guard): one cluster
        return [tuple(range(n))]
    k = max(2, min(n_neighbors, n - 1))
    reducer = fit_umap(
        X,
        n_neighbors=k,
        n_components=min(n_components, n - 2),  # spectral init needs c + 1 < n
        n_epochs=n_epochs,
        random_state=random_state,
        what=f"one-step UMAP on {n} points",
    )
    Y = np.asarray(reducer.embedding_, dtype=np.float32)
    gmm = select_gmm_by_bic(Y, bic_k_max(n, max_clusters), random_state=random_state)
    assigned = soft_assign(gmm.predict_proba(Y), threshold, None)
    clusters = {
        tuple(np.flatnonzero(assigned[:, j]).tolist())
        for j in range(assigned.shape[1])
        if assigned[:, j].any()
    }
    out = sorted(clusters)
    log.debug("one-step clustering of %d points: %d clusters", n, len(out))
    return out
