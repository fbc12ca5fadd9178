"""umap_reduce: the clusterer's UMAPs are umap-learn's own, fitted and used through its public API.

Nothing of umap is patched (the spectral start goes in as ``init=``), new points are placed by
``UMAP.transform`` itself, and a fit from our start is as good as one from UMAP's own.
"""

from __future__ import annotations

import inspect
import os
import pickle
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from sklearn.manifold import trustworthiness

from ingestor.cluster import umap_reduce
from ingestor.cluster.one_step import cluster_one_step
from ingestor.cluster.parallel import restore_index
from ingestor.cluster.two_step import TreeClusterer
from ingestor.cluster.umap_reduce import (
    ExactCosineIndex,
    fit_umap,
    load_umap,
    umap_call,
    unit_rows,
)
from tests.unit.cluster.test_two_step import sphere_blobs


@pytest.fixture(scope="module")
def points() -> NDArray[np.float32]:
    return sphere_blobs(n_blobs=5, per_blob=120, dim=48, spread=0.2, seed=3)[0]


def _umap_functions(umap: ModuleType) -> dict[str, Any]:
    """Every function, numba kernel and UMAP method that umap's modules define."""
    out: dict[str, Any] = {}
    spaces = [umap.umap_, umap.spectral, umap.layouts, umap.utils, umap.distances]
    for space in [*spaces, umap.UMAP]:
        for name, obj in vars(space).items():
            if callable(obj) and str(getattr(obj, "__module__", "")).startswith("umap"):
                out[f"{getattr(space, '__name__', space)}.{name}"] = obj
    return out


def _source_file(obj: Any) -> str:
    code = getattr(getattr(obj, "py_func", obj), "__code__", None)  # numba keeps the Python one
    return "" if code is None else os.path.realpath(code.co_filename)


def test_clustering_leaves_umap_as_installed(points: NDArray[np.float32]) -> None:
    umap = load_umap()
    before = _umap_functions(umap)
    clusterer = TreeClusterer(n_components=6, random_state=0, fit_sample=400).fit(points)
    clusterer.predict(points[:3] + 0.01)
    cluster_one_step(points[:60], random_state=0)
    after = _umap_functions(umap)
    assert after.keys() == before.keys()
    assert [k for k in before if after[k] is not before[k]] == []
    # Patched before this test ran (by an import, a warm-up) would still show: every function
    # umap's modules hold is defined in umap's own files.
    home = os.path.realpath(os.path.dirname(inspect.getfile(umap)))
    assert [
        k for k, f in after.items() if _source_file(f) and not _source_file(f).startswith(home)
    ] == []


def test_new_points_are_placed_by_umaps_own_transform(points: NDArray[np.float32]) -> None:
    clusterer = TreeClusterer(n_components=6, random_state=0).fit(points[:300])
    Q = unit_rows(points[300:310])  # as the clusterer passes them (the last bit matters)
    with umap_call("test", serial=True):
        expected = clusterer.global_umap_.transform(Q)
    np.testing.assert_array_equal(clusterer.transform_global(Q), expected)
    # the training rows themselves: UMAP hands back their fitted embedding
    reducer = clusterer.global_umap_
    np.testing.assert_array_equal(clusterer.transform_global(points[:300]), reducer.embedding_)


def test_a_fit_from_our_start_is_as_good_as_from_umaps_own(
    points: NDArray[np.float32], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against umap-learn's own ``init="spectral"`` on the same exact kNN graph."""
    X, k = points[:400], 20
    monkeypatch.setattr(umap_reduce, "slim", lambda reducer: reducer)  # keep the graph to compare
    ours = fit_umap(X, n_neighbors=k, n_components=6, n_epochs=200, random_state=0, what="t")
    index = ExactCosineIndex(X)
    theirs = load_umap().UMAP(
        n_neighbors=k,
        n_components=6,
        metric="cosine",
        n_epochs=200,
        random_state=0,
        n_jobs=1,
        precomputed_knn=(*index.query(X, k, exclude_self=True), index),
    )
    with umap_call("test", serial=True):
        theirs.fit(X)
    np.testing.assert_array_equal(ours.graph_.toarray(), theirs.graph_.toarray())
    score = [
        trustworthiness(X, m.embedding_, n_neighbors=10, metric="cosine") for m in (ours, theirs)
    ]
    assert score[0] == pytest.approx(score[1], abs=0.02)
    assert score[0] > 0.9


def test_a_fitted_umap_keeps_its_parameters_as_given(points: NDArray[np.float32]) -> None:
    """The seed, not the generator the fit used up; no (n, c) start in every stored model."""
    reducer = fit_umap(
        points[:200], n_neighbors=10, n_components=4, n_epochs=50, random_state=7, what="t"
    )
    assert reducer.random_state == 7
    assert reducer.init == "spectral"
    again = fit_umap(
        points[:200], n_neighbors=10, n_components=4, n_epochs=50, random_state=7, what="t"
    )
    np.testing.assert_array_equal(again.embedding_, reducer.embedding_)
    restored = pickle.loads(pickle.dumps(reducer))
    restored._knn_search_index.data = restored._raw_data  # as TreeClusterer.__setstate__ does
    with umap_call("test", serial=True):
        np.testing.assert_array_equal(
            restored.transform(points[200:205]), reducer.transform(points[200:205])
        )


def test_the_exact_index_finds_the_nearest_rows(points: NDArray[np.float32]) -> None:
    """UMAP's kNN convention: each point its own first neighbour, even beside a duplicate."""
    X = np.vstack([points[:50], points[:1]])  # row 50 duplicates row 0
    indices, dists = ExactCosineIndex(X).query(X, 5, exclude_self=True)
    np.testing.assert_array_equal(indices[:, 0], np.arange(51))
    assert indices[0, 1] == 50
    assert indices[50, 1] == 0
    brute = 1.0 - X @ X.T
    np.fill_diagonal(brute, np.inf)
    expected = np.maximum(np.sort(brute, axis=1)[:, :4], 0)
    np.testing.assert_allclose(dists[:, 1:], expected, atol=1e-6)
    np.testing.assert_allclose(dists[:, 0], 0.0, atol=1e-6)


def test_a_slimmed_umap_transforms_as_the_whole_one_and_pickles_smaller(
    points: NDArray[np.float32], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``slim`` drops the fit's graph and kNN arrays, which adRAP's transforms never read."""
    X, Q = points[:300], unit_rows(points[300:340])
    slimmed = fit_umap(X, n_neighbors=15, n_components=6, n_epochs=50, random_state=0, what="t")
    monkeypatch.setattr(umap_reduce, "slim", lambda reducer: reducer)
    whole = fit_umap(X, n_neighbors=15, n_components=6, n_epochs=50, random_state=0, what="t")
    assert slimmed.graph_ is None
    assert whole.graph_ is not None
    assert len(pickle.dumps(slimmed)) < 0.9 * len(pickle.dumps(whole))
    back = restore_index(pickle.loads(pickle.dumps(slimmed)))  # as a stored layer is read
    with umap_call("test", serial=True):
        np.testing.assert_array_equal(back.transform(Q), whole.transform(Q))
