"""umap_reduce.transform: UMAP's own transform, bit for bit, without its per-call overhead.

adRAP places every new node through stored UMAPs; the lean transform must give exactly what
``UMAP.transform`` gives, or a tree updated with it would drift from one updated with UMAP.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from numpy.typing import NDArray

from ingestor.cluster.two_step import TreeClusterer
from ingestor.cluster.umap_reduce import _start, load_umap, transform, umap_call
from tests.unit.cluster.test_two_step import sphere_blobs


@pytest.fixture(scope="module")
def points() -> NDArray[np.float32]:
    return sphere_blobs(n_blobs=5, per_blob=120, dim=48, spread=0.2, seed=3)[0]


@pytest.fixture(scope="module")
def clusterer(points: NDArray[np.float32]) -> TreeClusterer:
    # fit_sample below the size: the fit itself places the rest with transform
    return TreeClusterer(n_components=6, random_state=0, fit_sample=400).fit(points)


def _queries(points: NDArray[np.float32], n: int, seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    Q = points[rng.choice(len(points), n)] + 0.1 * rng.standard_normal((n, points.shape[1]))
    return (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("n", [1, 2, 7, 60])
def test_equals_umap_transform_bit_for_bit(
    clusterer: TreeClusterer, points: NDArray[np.float32], n: int
) -> None:
    reducers = [clusterer.global_umap_] + [
        m.umap for m in clusterer.local_models_ if m.umap is not None
    ]
    assert len(reducers) >= 3
    for i, reducer in enumerate(reducers):
        Q = _queries(points, n, seed=10 * n + i)
        with umap_call("test", serial=True):
            expected = reducer.transform(Q)
            got = transform(reducer, Q)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)


def test_a_point_identical_to_a_training_point(clusterer: TreeClusterer) -> None:
    reducer = clusterer.global_umap_
    Q = np.ascontiguousarray(reducer._raw_data[5:6])  # alone: its distance to itself is 0
    with umap_call("test", serial=True):
        np.testing.assert_array_equal(transform(reducer, Q), reducer.transform(Q))


def test_start_is_umaps_init_graph_transform(clusterer: TreeClusterer) -> None:
    """The weighted-mean start, against UMAP's own on memberships with every special case: a
    neighbour identical to the point (membership 1), a missing neighbour (-1), a zero weight."""
    embedding = clusterer.global_umap_.embedding_
    rng = np.random.default_rng(0)
    indices = np.stack([rng.choice(len(embedding), 6, replace=False) for _ in range(5)])
    indices = indices.astype(np.int32)
    vals = rng.uniform(0.05, 0.9, indices.shape).astype(np.float32)
    vals[1, 3] = 1.0  # identical neighbour, not the first column
    vals[2, [0, 4]] = 1.0  # two identical neighbours: the lower column wins
    indices[3, 2] = -1  # a neighbour the search did not return
    vals[3, 2] = 0.0
    vals[4, 1] = 0.0  # a membership that underflowed
    rows = np.repeat(np.arange(len(indices)), indices.shape[1])
    live = indices.ravel() >= 0
    graph = scipy.sparse.coo_matrix(
        (vals.ravel()[live], (rows[live], indices.ravel()[live])),
        shape=(len(indices), len(embedding)),
    ).tocsr()
    graph.eliminate_zeros()
    expected = load_umap().umap_.init_graph_transform(graph, embedding)
    np.testing.assert_array_equal(_start(indices, vals, embedding), expected)


def test_the_training_data_gives_the_fitted_embedding(clusterer: TreeClusterer) -> None:
    reducer = clusterer.global_umap_
    np.testing.assert_array_equal(transform(reducer, reducer._raw_data), reducer.embedding_)


def test_a_model_it_does_not_follow_goes_through_umap(
    clusterer: TreeClusterer, points: NDArray[np.float32], monkeypatch: pytest.MonkeyPatch
) -> None:
    reducer = clusterer.global_umap_
    calls: list[int] = []
    original = type(reducer).transform

    def counted(self: object, X: NDArray[np.float32]) -> NDArray[np.float32]:
        calls.append(len(X))
        return original(self, X)

    monkeypatch.setattr(type(reducer), "transform", counted)
    Q = _queries(points, 4, seed=2)
    with umap_call("test", serial=True):
        transform(reducer, Q)
        assert calls == []
        monkeypatch.setattr(reducer, "densmap", True)  # densMAP: UMAP's own code (which refuses)
        with pytest.raises(NotImplementedError):
            transform(reducer, Q)
    assert calls == [4]
