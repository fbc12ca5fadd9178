"""A seeded UMAP fit is repeatable: its spectral initialisation is the same for the same graph.

ARPACK (UMAP's eigensolver) returns eigenvectors with either sign and, for equal eigenvalues,
any basis of their space, from one call to the next: the same seeded fit gave one of several
layouts, and two copies of one tree updated alike drifted apart. Graphs of up to
DENSE_SPECTRAL_MAX vertices (every local UMAP of a build, the refits of small groups) are
solved densely; above, ARPACK stays, with its signs fixed.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from ingestor.cluster.two_step import TreeClusterer
from ingestor.cluster.umap_reduce import DENSE_SPECTRAL_MAX, load_umap


def ring(n: int) -> scipy.sparse.csr_matrix:
    """A cycle graph: its Laplacian's eigenvalues come in equal pairs."""
    rows = np.arange(n)
    cols = (rows + 1) % n
    ones = np.ones(2 * n)
    return scipy.sparse.csr_matrix((ones, (np.r_[rows, cols], np.r_[cols, rows])), shape=(n, n))


@pytest.mark.parametrize("n", [13, 60, DENSE_SPECTRAL_MAX])
def test_the_spectral_init_of_one_graph_is_always_the_same(n: int) -> None:
    spectral = load_umap().spectral
    graph = ring(n)
    data = np.zeros((n, 4))
    first = spectral.spectral_layout(data, graph, 10, np.random.RandomState(0))
    for _ in range(8):
        again = spectral.spectral_layout(data, graph, 10, np.random.RandomState(0))
        np.testing.assert_array_equal(again, first)


def test_the_dense_init_spans_the_laplacians_smallest_eigenvectors() -> None:
    spectral = load_umap().spectral
    graph = ring(13)
    init = spectral.spectral_layout(np.zeros((13, 4)), graph, 4, np.random.RandomState(0))
    degree = np.asarray(graph.sum(axis=0)).ravel()
    laplacian = np.eye(13) - graph.toarray() / np.sqrt(np.outer(degree, degree))
    values = np.linalg.eigvalsh(laplacian)
    # Each column is an eigenvector of the 2nd..5th smallest eigenvalues, unit length.
    for j in range(4):
        v = init[:, j]
        assert np.linalg.norm(v) == pytest.approx(1.0)
        rayleigh = v @ laplacian @ v
        assert rayleigh == pytest.approx(values[1 + j], abs=1e-9)
        assert np.max(np.abs(v)) == pytest.approx(np.max(v))  # its largest entry is positive


def test_a_seeded_fit_of_a_small_group_is_repeatable() -> None:
    # 13 points evenly on a circle (in 48 dims): their neighbour graph is a ring.
    angle = 2 * np.pi * np.arange(13) / 13
    X = np.zeros((13, 48), dtype=np.float32)
    X[:, 0], X[:, 1], X[:, 2] = np.cos(angle), np.sin(angle), 1.0
    first = TreeClusterer(random_state=0, n_epochs=50).fit(X)
    for _ in range(5):
        again = TreeClusterer(random_state=0, n_epochs=50).fit(X)
        np.testing.assert_array_equal(again.global_umap_.embedding_, first.global_umap_.embedding_)
        assert again.clusters_ == first.clusters_
