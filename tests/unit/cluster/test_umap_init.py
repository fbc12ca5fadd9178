"""A seeded UMAP fit is repeatable: its spectral start is the same for the same graph.

ARPACK (UMAP's eigensolver) returns eigenvectors with either sign and, for equal eigenvalues,
any basis of their space, from one call to the next: the same seeded fit gave one of several
layouts, and two copies of one tree updated alike drifted apart. ``spectral_init`` solves graphs
of up to DENSE_SPECTRAL_MAX vertices (every local UMAP of a build, the refits of small groups)
densely and fixes every column's sign; UMAP gets the result as ``init=``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from ingestor.cluster import umap_reduce
from ingestor.cluster.spectral_init import DENSE_SPECTRAL_MAX, pruned_graph, spectral_init
from ingestor.cluster.two_step import TreeClusterer
from ingestor.cluster.umap_reduce import ExactCosineIndex, load_umap
from tests.unit.cluster.test_two_step import sphere_blobs


def ring(n: int) -> scipy.sparse.csr_matrix:
    """A cycle graph: its Laplacian's eigenvalues come in equal pairs."""
    rows = np.arange(n)
    cols = (rows + 1) % n
    ones = np.ones(2 * n)
    return scipy.sparse.csr_matrix((ones, (np.r_[rows, cols], np.r_[cols, rows])), shape=(n, n))


def knn_graph(X: np.ndarray, k: int) -> scipy.sparse.coo_matrix:
    """UMAP's fuzzy graph of X on its exact cosine kNN (what ``fit_umap`` builds)."""
    indices, dists = ExactCosineIndex(X).query(X, k, exclude_self=True)
    rng = np.random.RandomState(0)
    return load_umap().umap_.fuzzy_simplicial_set(
        X, k, rng, "cosine", knn_indices=indices, knn_dists=dists
    )[0]


@pytest.mark.parametrize("n", [13, 60, DENSE_SPECTRAL_MAX])
def test_the_spectral_start_of_one_graph_is_always_the_same(n: int) -> None:
    graph = ring(n)
    data = np.zeros((n, 4), dtype=np.float32)
    first = spectral_init(data, graph, 10, np.random.RandomState(0), 200)
    for _ in range(8):
        again = spectral_init(data, graph, 10, np.random.RandomState(0), 200)
        np.testing.assert_array_equal(again, first)


def test_the_dense_start_spans_the_laplacians_smallest_eigenvectors() -> None:
    graph = ring(13)
    init = spectral_init(np.zeros((13, 4), np.float32), graph, 4, np.random.RandomState(0), 200)
    degree = np.asarray(graph.sum(axis=0)).ravel()
    laplacian = np.eye(13) - graph.toarray() / np.sqrt(np.outer(degree, degree))
    values = np.linalg.eigvalsh(laplacian)
    # Each column is an eigenvector of the 2nd..5th smallest eigenvalues (scaled, noise 1e-4).
    assert np.abs(init).max() == pytest.approx(10.0, abs=1e-3)
    for j in range(4):
        v = init[:, j] / np.linalg.norm(init[:, j])
        assert v @ laplacian @ v == pytest.approx(values[1 + j], abs=1e-4)
        assert np.max(v) == pytest.approx(np.max(np.abs(v)), abs=1e-4)  # largest entry positive


@pytest.mark.parametrize("n", [150, 600])  # below DENSE_SPECTRAL_MAX: dense; above: ARPACK
def test_the_start_is_umaps_own_spectral_layout_up_to_sign(n: int) -> None:
    """Against UMAP's ``spectral_layout`` of the graph its fit lays out (pruned as UMAP prunes)."""
    X = sphere_blobs(n_blobs=1, per_blob=n, dim=16, spread=1.0, seed=4)[0]
    graph = knn_graph(X, 15)
    dim = 4
    ours = spectral_init(X, graph, dim, np.random.RandomState(0), 200)
    theirs = load_umap().spectral.spectral_layout(
        X, pruned_graph(graph, 200), dim, np.random.RandomState(0)
    )
    for j in range(dim):
        assert abs(np.corrcoef(ours[:, j], theirs[:, j])[0, 1]) > 0.999


def test_the_pruned_graph_drops_umaps_weak_edges() -> None:
    graph = scipy.sparse.coo_matrix(np.array([[0, 1.0, 0.004], [1.0, 0, 0.5], [0.004, 0.5, 0]]))
    kept = pruned_graph(graph, 200).toarray()  # an edge under max / n_epochs goes
    np.testing.assert_array_equal(kept, [[0, 1.0, 0], [1.0, 0, 0.5], [0, 0.5, 0]])
    assert graph.toarray()[0, 2] == 0.004, "the caller's graph is left as it was"
    few = pruned_graph(graph, 10).toarray()  # 10 epochs or fewer: UMAP prunes at its default 500
    assert few[0, 2] == 0.004


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


def test_a_seeded_fit_of_a_graph_in_separate_parts_is_repeatable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past DENSE_SPECTRAL_MAX a graph in several connected components is laid out one
    component at a time (each dense and sign-fixed) around a layout of the components."""
    X = sphere_blobs(n_blobs=8, per_blob=40, dim=64, spread=0.02, seed=5)[0]
    with monkeypatch.context() as m:  # the fit keeps its graph, to check the test's premise
        m.setattr(umap_reduce, "slim", lambda reducer: reducer)
        first = TreeClusterer(random_state=0, n_epochs=50).fit(X)
    graph = first.global_umap_.graph_
    assert graph.shape[0] > DENSE_SPECTRAL_MAX
    assert scipy.sparse.csgraph.connected_components(graph)[0] == 8
    for _ in range(2):
        again = TreeClusterer(random_state=0, n_epochs=50).fit(X)
        np.testing.assert_array_equal(again.global_umap_.embedding_, first.global_umap_.embedding_)
        assert again.clusters_ == first.clusters_
