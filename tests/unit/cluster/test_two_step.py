"""TreeClusterer (RAPTOR's two-step UMAP + GMM clustering) and the BIC search behind it.

UMAP fits cost a numba compilation on first use in a process (cached on disk afterwards), so the
fitted clusterers are shared through module-scoped fixtures.
"""

from __future__ import annotations

from pathlib import Path

import joblib
import numpy as np
import pytest
from numpy.typing import NDArray
from sklearn.metrics import adjusted_rand_score

from ingestor.cluster.bic_search import _coarse_to_fine, bic_k_max, select_gmm_by_bic
from ingestor.cluster.online_gmm import OnlineGMM
from ingestor.cluster.two_step import LocalModel, TreeClusterer, warm_up


def sphere_blobs(
    n_blobs: int, per_blob: int, dim: int, spread: float, seed: int
) -> tuple[NDArray[np.float32], NDArray[np.intp]]:
    """Well-separated Gaussian blobs, L2-normalised onto the unit sphere."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_blobs, dim))
    labels = np.repeat(np.arange(n_blobs), per_blob)
    X = centers[labels] + spread * rng.standard_normal((len(labels), dim))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32), labels


@pytest.fixture(scope="module")
def blobs() -> tuple[NDArray[np.float32], NDArray[np.intp]]:
    return sphere_blobs(n_blobs=4, per_blob=50, dim=32, spread=0.15, seed=0)


@pytest.fixture(scope="module")
def fitted(blobs: tuple[NDArray[np.float32], NDArray[np.intp]]) -> TreeClusterer:
    return TreeClusterer(random_state=0).fit(blobs[0])


def members_of(clusterer: TreeClusterer) -> list[set[int]]:
    """The final clusters each row of the fitted X belongs to."""
    n = len(clusterer.global_labels_)
    out: list[set[int]] = [set() for _ in range(n)]
    for cid, cluster in enumerate(clusterer.clusters_):
        for i in cluster:
            out[i].add(cid)
    return out


def test_separable_blobs_are_recovered(
    blobs: tuple[NDArray[np.float32], NDArray[np.intp]], fitted: TreeClusterer
) -> None:
    """The global step finds the 4 blobs; no final (local) cluster mixes two blobs."""
    _, truth = blobs
    assert adjusted_rand_score(truth, fitted.global_labels_) > 0.9
    for cluster in fitted.clusters_:
        assert len(set(truth[list(cluster)].tolist())) == 1


def test_final_clusters_cover_every_point_as_sorted_tuples(fitted: TreeClusterer) -> None:
    n = len(fitted.global_labels_)
    assert fitted.n_clusters_ == len(fitted.clusters_) > 1
    assert set().union(*map(set, fitted.clusters_)) == set(range(n))
    for cluster in fitted.clusters_:
        assert isinstance(cluster, tuple)
        assert list(cluster) == sorted(set(cluster))
    # every final cluster lies inside one global cluster, and local models partition the ids
    ids = [cid for local in fitted.local_models_ for cid in local.cluster_ids if cid >= 0]
    assert sorted(ids) == list(range(fitted.n_clusters_))
    for g, local in enumerate(fitted.local_models_):
        assert (fitted.global_labels_[local.members] == g).all()


def test_local_soft_assignment_respects_the_threshold(fitted: TreeClusterer) -> None:
    """A point is in local cluster j iff its posterior > threshold, or j is its argmax."""
    checked = 0
    for local in fitted.local_models_:
        if local.gmm is None:
            continue
        assert local.embedding is not None
        posterior = local.gmm.predict_proba(local.embedding)
        for row, i in enumerate(local.members):
            for comp, cid in enumerate(local.cluster_ids):
                expected = posterior[row, comp] > fitted.threshold
                expected |= comp == int(np.argmax(posterior[row]))
                inside = cid >= 0 and int(i) in fitted.clusters_[cid]
                assert inside == expected
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("n", [1, 2, 5, 11])
def test_at_most_n_components_plus_one_points_make_one_cluster(n: int) -> None:
    X, _ = sphere_blobs(2, n, 16, 0.1, seed=n)
    clusterer = TreeClusterer().fit(X[:n])
    assert clusterer.clusters_ == [tuple(range(n))]
    assert clusterer.global_umap_ is None
    assert clusterer.predict(X[n:]) == [frozenset({0})] * n


def test_twelve_points_take_the_umap_path() -> None:
    X, _ = sphere_blobs(2, 6, 16, 0.1, seed=12)
    clusterer = TreeClusterer().fit(X)
    assert clusterer.global_umap_ is not None
    assert set().union(*map(set, clusterer.clusters_)) == set(range(12))
    assert all(len(p) >= 1 for p in clusterer.predict(X[:3] + 0.01))


@pytest.mark.parametrize("layout", ["two_values", "all_identical"])
def test_duplicate_vectors_do_not_crash(layout: str) -> None:
    rng = np.random.default_rng(1)
    X = np.repeat(rng.standard_normal((2, 24)), 25, axis=0)
    if layout == "all_identical":
        X[:] = X[0]
    else:
        X = np.vstack([X, rng.standard_normal((5, 24))])
    clusterer = TreeClusterer().fit(X)
    assert set().union(*map(set, clusterer.clusters_)) == set(range(len(X)))
    assert len(clusterer.predict(X[:4])) == 4


def test_same_seed_gives_the_same_clusters(
    blobs: tuple[NDArray[np.float32], NDArray[np.intp]], fitted: TreeClusterer
) -> None:
    again = TreeClusterer(random_state=0).fit(blobs[0])
    assert again.clusters_ == fitted.clusters_
    np.testing.assert_array_equal(again.global_labels_, fitted.global_labels_)


def test_joblib_round_trip_keeps_predict(
    blobs: tuple[NDArray[np.float32], NDArray[np.intp]], fitted: TreeClusterer, tmp_path: Path
) -> None:
    rng = np.random.default_rng(7)
    new = blobs[0][::9] + 0.02 * rng.standard_normal(blobs[0][::9].shape).astype(np.float32)
    path = tmp_path / "clusterer.joblib"
    joblib.dump(fitted, path)
    loaded = joblib.load(path)
    assert loaded.predict(new) == fitted.predict(new)
    assert loaded.clusters_ == fitted.clusters_


def test_predict_places_training_points_in_their_own_global_cluster(
    blobs: tuple[NDArray[np.float32], NDArray[np.intp]], fitted: TreeClusterer
) -> None:
    X, _ = blobs
    rows = np.arange(0, len(X), 3)
    predicted = fitted.predict_global(X[rows])
    assert (predicted == fitted.global_labels_[rows]).mean() >= 0.95
    for g, clusters in zip(predicted, fitted.predict(X[rows]), strict=True):
        assert clusters  # at least one, all among the local clusters of the chosen global one
        assert clusters <= set(fitted.local_models_[g].cluster_ids)


def test_predict_mostly_returns_a_cluster_containing_the_training_point() -> None:
    """With real sub-structure (3 tight sub-blobs per blob), re-placing a training point lands it
    back in one of its own clusters (UMAP ``transform`` interpolates its neighbours, so not
    always: local clusters of 4-6 points split noise)."""
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((12, 32))
    X = np.repeat(centers, 15, axis=0) + 0.05 * rng.standard_normal((180, 32))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    clusterer = TreeClusterer().fit(X)
    own = members_of(clusterer)
    rows = np.arange(0, len(X), 2)
    hits = [bool(p & own[i]) for i, p in zip(rows, clusterer.predict(X[rows]), strict=True)]
    assert np.mean(hits) >= 0.7


def test_fit_sample_path_fits_on_a_sample_and_transforms_the_rest() -> None:
    X, truth = sphere_blobs(n_blobs=3, per_blob=100, dim=32, spread=0.15, seed=5)
    clusterer = TreeClusterer(fit_sample=120).fit(X)
    assert clusterer.global_umap_ is not None
    assert clusterer.global_umap_.embedding_.shape[0] == 120
    assert adjusted_rand_score(truth, clusterer.global_labels_) > 0.9
    assert set().union(*map(set, clusterer.clusters_)) == set(range(len(X)))
    big = max(clusterer.local_models_, key=lambda local: len(local.members))
    assert big.umap is not None
    assert big.umap.embedding_.shape[0] == 100


def test_transform_helpers_return_reduced_embeddings(
    blobs: tuple[NDArray[np.float32], NDArray[np.intp]], fitted: TreeClusterer
) -> None:
    X, _ = blobs
    assert fitted.transform_global(X[:5]).shape == (5, 10)
    g = next(g for g, local in enumerate(fitted.local_models_) if local.umap is not None)
    assert fitted.transform_local(g, X[:3]).shape == (3, 10)
    tiny = TreeClusterer().fit(X[:4])
    with pytest.raises(ValueError, match="too few points"):
        tiny.transform_global(X[:1])
    with pytest.raises(ValueError, match="no local UMAP"):
        tiny.transform_local(0, X[:1])


def test_invalid_input_is_refused(fitted: TreeClusterer) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        TreeClusterer().fit(np.zeros((0, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        TreeClusterer().fit(np.full((20, 8), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match="metric"):
        TreeClusterer(metric="euclidean").fit(np.ones((20, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="features"):
        fitted.predict(np.ones((2, 7), dtype=np.float32))


def test_local_model_seeds_an_online_gmm_with_the_same_clusters(fitted: TreeClusterer) -> None:
    """adRAP continues a local clustering from its LocalModel without refitting."""
    local: LocalModel = next(m for m in fitted.local_models_ if m.gmm is not None)
    assert local.gmm is not None
    assert local.embedding is not None
    online = OnlineGMM.from_gmm(local.gmm, local.embedding, cluster_ids=local.cluster_ids)
    rows = local.members
    expected = {
        cid: frozenset(np.flatnonzero(np.isin(rows, fitted.clusters_[cid])).tolist())
        for cid in local.cluster_ids
        if cid >= 0
    }
    assert online.clusters() == expected


# -- BIC search ----------------------------------------------------------------------------


def test_bic_k_max_follows_the_paper_and_caps_at_half_the_points() -> None:
    assert bic_k_max(1300, 50) == 50
    assert bic_k_max(10_000, 50) == 100  # √n above 50
    assert bic_k_max(40, 50) == 20
    assert bic_k_max(1, 50) == 1


def test_coarse_to_fine_finds_the_minimum_of_a_noisy_valley_with_fewer_fits() -> None:
    rng = np.random.default_rng(0)
    for true_k in (1, 3, 9, 17, 33, 49):
        noise = rng.normal(0, 0.3, 51)
        curve = {k: abs(k - true_k) ** 1.5 + noise[k] for k in range(1, 51)}
        seen: list[int] = []

        def bic(k: int, seen: list[int] = seen, curve: dict[int, float] = curve) -> float:
            seen.append(k)
            return curve[k]

        _coarse_to_fine(bic, 50)
        best = min(set(seen), key=curve.__getitem__)
        assert abs(best - true_k) <= 1
        assert len(set(seen)) < 30


def test_select_gmm_by_bic_finds_separated_components() -> None:
    rng = np.random.default_rng(2)
    centers = rng.normal(0, 20, (5, 10))
    Y = np.repeat(centers, 40, axis=0) + rng.standard_normal((200, 10))
    assert select_gmm_by_bic(Y, 20, random_state=0).n_components == 5
    assert select_gmm_by_bic(Y, 20, random_state=0, exhaustive=True).n_components == 5


def test_warm_up_compiles_without_warnings() -> None:
    warm_up()


def test_the_bic_search_starts_at_k_min() -> None:
    """A floor on k: the search only evaluates k_min..k_max (isotropic noise: BIC alone says 1)."""
    Y = np.random.default_rng(5).standard_normal((400, 4))
    assert select_gmm_by_bic(Y, 20, random_state=0).n_components == 1
    for exhaustive in (False, True):
        got = select_gmm_by_bic(Y, 20, random_state=0, k_min=6, exhaustive=exhaustive)
        assert 6 <= got.n_components <= 20
    assert select_gmm_by_bic(Y, 3, random_state=0, k_min=9).n_components == 3  # clipped


def test_local_clusters_keep_a_bounded_mean_size_where_bic_alone_makes_few() -> None:
    """Structure-less points: BIC alone fits few local components, so clusters grow with the
    global cluster (265k synthetic leaves: 40 leaves a cluster on average, 217 at most). With
    max_cluster_size the local step fits at least ceil(m / size) components to m points."""
    X, _ = sphere_blobs(n_blobs=1, per_blob=480, dim=24, spread=1.0, seed=6)

    def local_ks(size: int | None) -> list[tuple[int, int]]:
        c = TreeClusterer(random_state=0, n_epochs=30, max_cluster_size=size).fit(X)
        return [
            (len(m.members), sum(1 for cid in m.cluster_ids if cid >= 0))
            for m in c.local_models_
            if m.gmm is not None
        ]

    unbounded = local_ks(None)
    # The bound that BIC's choice breaks in at least one global cluster (how the points fall into
    # global clusters depends on UMAP's layout, which differs between CPUs).
    size = max(m // (k + 2) for m, k in unbounded)
    assert size >= 3, unbounded
    assert any(k < -(-m // size) - 1 for m, k in unbounded), unbounded
    bounded = local_ks(size)
    assert bounded, "no local model was fitted"
    for m, k in bounded:
        assert k >= -(-m // size) - 1, f"{m} points in {k} clusters"  # an empty component: no id
    c = TreeClusterer(random_state=0, n_epochs=30, max_cluster_size=size).fit(X)
    sizes = [len(members) for members in c.clusters_]
    assert np.mean(sizes) <= size * 1.5, sizes
