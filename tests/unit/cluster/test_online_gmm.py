"""adRAP's online GMM (Algorithm 2, Equation 3) and the vectorised EM it shares with clustering."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from sklearn.mixture import GaussianMixture

from ingestor.cluster.em import bic, fit_gmm, run_em
from ingestor.cluster.gmm import (
    GaussianParams,
    gaussian_parameters,
    params_of,
    precision_cholesky,
)
from ingestor.cluster.kmeans import kmeans_labels
from ingestor.cluster.online_gmm import IdCounter, OnlineGMM, incremental_m_step

REG = 1e-6


def weighted_m_step(X: NDArray[np.float64], resp: NDArray[np.float64]) -> GaussianParams:
    """Equation 2 written out component by component (scikit-learn's M-step, with reg_covar)."""
    _n, d = X.shape
    weights, means, covs = [], [], []
    for k in range(resp.shape[1]):
        r = resp[:, k]
        nk = r.sum() + 10 * np.finfo(np.float64).eps
        mu = (r[:, None] * X).sum(axis=0) / nk
        diff = X - mu
        covs.append((r[:, None] * diff).T @ diff / nk + REG * np.eye(d))
        means.append(mu)
        weights.append(nk)
    w = np.array(weights)
    return GaussianParams(w / w.sum(), np.array(means), np.array(covs))


@st.composite
def weighted_points(draw: st.DrawFn) -> tuple[NDArray[np.float64], ...]:
    n = draw(st.integers(2, 25))
    d = draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.normal(0, draw(st.floats(0.1, 10.0)), (n, d))
    resp = rng.dirichlet(np.ones(k), size=n)
    x = rng.normal(0, 3.0, d)
    gamma = rng.dirichlet(np.ones(k))
    return X, resp, x, gamma


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(weighted_points())
def test_equation_3_equals_the_m_step_on_all_points_with_old_responsibilities_fixed(
    data: tuple[NDArray[np.float64], ...],
) -> None:
    X, resp, x, gamma = data
    before = weighted_m_step(X, resp)
    updated = incremental_m_step(before, len(X), x, gamma, REG)
    expected = weighted_m_step(np.vstack([X, x]), np.vstack([resp, gamma]))
    np.testing.assert_allclose(updated.weights, expected.weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(updated.means, expected.means, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(updated.covariances, expected.covariances, rtol=1e-8, atol=1e-9)


def test_an_added_point_refactors_only_the_components_it_reaches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per point, the online GMM refactored every component's covariance twice (~150 of them in
    a large group); the ones the point does not reach keep their factorisation."""
    from ingestor.cluster.online_gmm import update

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.3, (10, 3)) for c in (0.0, 5.0, 10.0)])
    before = weighted_m_step(X, np.repeat(np.eye(3), 10, axis=0))
    before.precision_cholesky()  # as the E-step that gave gamma leaves it
    factored: list[int] = []

    def counting(covariances: NDArray[np.float64]) -> NDArray[np.float64]:
        factored.append(len(covariances))
        return precision_cholesky(covariances)

    monkeypatch.setattr(update, "precision_cholesky", counting)
    updated = incremental_m_step(before, len(X), np.zeros(3), np.array([0.7, 0.3, 1e-15]), REG)
    assert factored == [2]
    np.testing.assert_allclose(
        updated.precision_cholesky(), precision_cholesky(updated.covariances)
    )
    assert np.array_equal(updated.covariances[2], before.covariances[2])
    assert "_prec_chol" not in pickle.loads(pickle.dumps(updated)).__dict__  # derived, not saved


def test_vectorised_m_step_equals_the_written_out_one() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5))
    resp = rng.dirichlet(np.ones(3), size=40)
    ours = gaussian_parameters(X, resp, REG)
    ref = weighted_m_step(X, resp)
    np.testing.assert_allclose(ours.weights / ours.weights.sum(), ref.weights, rtol=1e-12)
    np.testing.assert_allclose(ours.means, ref.means, rtol=1e-10)
    np.testing.assert_allclose(ours.covariances, ref.covariances, rtol=1e-9, atol=1e-12)


def test_run_em_matches_scikit_learn_from_the_same_start() -> None:
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(c, 1.0, (30, 4)) for c in (0.0, 6.0, 12.0)])
    start = gaussian_parameters(X, np.eye(3)[rng.integers(0, 3, len(X))], REG)
    start = GaussianParams(start.weights / start.weights.sum(), start.means, start.covariances)
    ours = run_em(X, start, max_iter=50)
    ref = GaussianMixture(
        3,
        weights_init=start.weights,
        means_init=start.means,
        precisions_init=np.linalg.inv(start.covariances),
        max_iter=50,
    ).fit(X)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(ours.means_, ref.means_, atol=1e-8)
    np.testing.assert_allclose(ours.covariances_, ref.covariances_, atol=1e-8)
    assert bic(X, params_of(ours)) == pytest.approx(ref.bic(X), rel=1e-10)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-8)


def test_kmeans_labels_recover_separated_groups_and_survive_duplicates() -> None:
    rng = np.random.default_rng(2)
    X = np.repeat(rng.normal(0, 10, (4, 3)), 10, axis=0) + 0.1 * rng.normal(size=(40, 3))
    labels = kmeans_labels(X, 4, random_state=0)
    assert len({tuple(np.flatnonzero(labels == j)) for j in range(4)}) == 4
    assert {len(set(labels[i : i + 10])) for i in range(0, 40, 10)} == {1}
    assert kmeans_labels(np.zeros((6, 2)), 3, random_state=0).shape == (6,)


# -- Algorithm 2 ---------------------------------------------------------------------------


def three_blobs(seed: int = 0, per: int = 10) -> tuple[NDArray[np.float64], GaussianMixture]:
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    X = np.vstack([c + 0.5 * rng.normal(size=(per, 2)) for c in centers])
    return X, fit_gmm(X, 3, random_state=0)


def test_initial_memberships_follow_the_posterior() -> None:
    X, gmm = three_blobs()
    online = OnlineGMM.from_gmm(gmm, X, cluster_ids=[7, 8, 9])
    clusters = online.clusters()
    assert set(clusters) == {7, 8, 9}
    assert sorted(len(m) for m in clusters.values()) == [10, 10, 10]
    assert online.ids.take() == 10  # fresh ids continue after the given ones


def test_far_points_at_large_n_grow_a_cluster_until_it_splits() -> None:
    """n > τ_n: incremental M-step; the cluster that absorbs far points exceeds τ_c and splits."""
    X, gmm = three_blobs()
    online = OnlineGMM.from_gmm(gmm, X, cluster_ids=[7, 8, 9], tau_n=5, tau_c=11)
    rng = np.random.default_rng(4)
    results = [online.add(np.array([25.0, 25.0]) + 0.3 * rng.normal(size=2)) for _ in range(4)]
    assert not any(r.refit for r in results)
    first = results[0]
    assert len(first.assigned) == 1
    assert first.changed == first.assigned  # only the absorbing cluster's summary is stale
    assert not first.created
    assert not first.removed
    splits = [r for r in results if r.split]
    assert splits, "a cluster grown past tau_c must be split"
    r = splits[0]
    assert r.split <= r.changed
    assert r.created
    far = {res.point for res in results[: results.index(r) + 1]}
    new_cluster = online.clusters()[next(iter(r.created))]
    assert new_cluster <= far  # the split cut the far points off the original blob


def test_a_cluster_is_offered_its_split_past_tau_c_and_again_after_each_quarter_of_growth() -> None:
    """An offer fits three mixtures to the cluster's members: offered on every insert (Algorithm
    2 as printed) it cost O(size) per insert, so inserts got dearer as clusters grew with the tree.
    It is offered when it passes tau_c and again each time it grew by a quarter since."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 2))
    online = OnlineGMM(params_of(GaussianMixture(1, random_state=0).fit(X)), X, tau_n=5, tau_c=11)
    (cid,) = online.members
    sizes: list[int] = []
    real = online._try_split

    def spy(c: int, *, cut: bool = False) -> bool:
        sizes.append(len(online.members[c]))
        return real(c, cut=cut)

    online._try_split = spy  # type: ignore[method-assign,assignment]
    for _ in range(52):  # one blob: BIC keeps it whole every time
        online.add(rng.normal(size=2))
        assert not online.offer_due(cid)
    assert list(online.members) == [cid]
    assert sizes == [12, 16, 21, 27, 34, 43, 54]
    for pid in sorted(online.members[cid])[:51]:  # shrunk to 9, it is offered past tau_c again
        online.remove(pid)
    sizes.clear()
    for _ in range(3):
        online.add(rng.normal(size=2))
        assert not any(map(online.offer_due, online.members))
    assert sizes == [12]


@pytest.mark.parametrize("greedy", [False, True])
def test_an_added_points_clusters_are_all_it_belongs_to(greedy: bool) -> None:
    """The point's clusters are read from the ones it joined and the parts of their splits
    only (a look at every cluster cost O(k) per point); they must be all of them."""
    X, gmm = three_blobs(per=12)
    online = OnlineGMM.from_gmm(gmm, X, cluster_ids=[7, 8, 9], tau_n=5, tau_c=6, threshold=0.05)
    rng = np.random.default_rng(1)
    for _ in range(80):
        x = rng.choice([0.0, 5.0, 10.0], size=2) + rng.normal(size=2)
        result = online.add_greedy(x) if greedy else online.add(x)
        assert result.assigned == online.memberships(result.point)
    assert greedy or len(online.members) > 3  # splits happened on the way


def test_small_n_runs_full_em_and_keeps_unchanged_cluster_ids() -> None:
    X, gmm = three_blobs()
    online = OnlineGMM.from_gmm(gmm, X, cluster_ids=[7, 8, 9], tau_n=100)
    before = online.clusters()
    result = online.add(np.array([10.2, 0.1]))
    assert result.refit
    assert set(online.clusters()) == {7, 8, 9}
    target = next(cid for cid, m in before.items() if 10 in m)  # points 10-19 are blob (10, 0)
    assert result.assigned == {target}
    assert result.changed == {target}
    assert not result.created
    assert not result.removed


def test_tau_c_controls_splitting_and_tau_n_the_branch() -> None:
    X, gmm = three_blobs()
    never = OnlineGMM.from_gmm(gmm, X, tau_n=5, tau_c=1000)
    rng = np.random.default_rng(4)
    for _ in range(6):
        result = never.add(np.array([25.0, 25.0]) + 0.3 * rng.normal(size=2))
        assert not result.split
        assert not result.created
        assert not result.refit
    always_refit = OnlineGMM.from_gmm(gmm, X, tau_n=10_000)
    assert always_refit.add(np.array([0.0, 0.0])).refit


def test_threshold_controls_soft_membership() -> None:
    rng = np.random.default_rng(6)
    X = np.vstack([rng.normal(c, 1.0, (30, 2)) for c in ([0.0, 0.0], [3.0, 0.0])])
    gmm = fit_gmm(X, 2, random_state=0)
    between = np.array([1.5, 0.0])  # where the two overlapping blobs meet
    loose = OnlineGMM.from_gmm(gmm, X, tau_n=5, threshold=1e-9)
    strict = OnlineGMM.from_gmm(gmm, X, tau_n=5, threshold=0.99)
    assert len(loose.add(between).assigned) >= 2
    assert len(strict.add(between).assigned) == 1  # only the most probable one


def test_remove_empties_and_removes_a_cluster() -> None:
    X, gmm = three_blobs(per=3)
    online = OnlineGMM.from_gmm(gmm, X, cluster_ids=[0, 1, 2], tau_n=2)
    victim = next(cid for cid, m in online.clusters().items() if m == {0, 1, 2})
    assert online.remove(0).changed == {victim}
    online.remove(1)
    result = online.remove(2)
    assert result.removed == {victim}
    assert victim not in online.clusters()
    assert online.params.k == 2
    assert online.n == 6
    assert online.params.weights.sum() == pytest.approx(1.0)
    with pytest.raises(KeyError):
        online.remove(0)
    follow_up = online.add(np.array([0.0, 10.0]))  # still works after the removal
    assert follow_up.assigned


def test_shared_id_counter_never_hands_out_a_used_id() -> None:
    X, gmm = three_blobs()
    ids = IdCounter()
    a = OnlineGMM.from_gmm(gmm, X, cluster_ids=[0, 1, 2], ids=ids, tau_n=5, tau_c=11)
    b = OnlineGMM.from_gmm(gmm, X, cluster_ids=[3, 4, 5], ids=ids, tau_n=5, tau_c=11)
    rng = np.random.default_rng(5)
    for online in (a, b):
        for _ in range(4):
            online.add(np.array([25.0, 25.0]) + 0.3 * rng.normal(size=2))
    assert not set(a.clusters()) & set(b.clusters())


def test_pickle_round_trip_keeps_state() -> None:
    X, gmm = three_blobs()
    online = OnlineGMM.from_gmm(gmm, X, tau_n=5)
    online.add(np.array([1.0, 1.0]))
    copy = pickle.loads(pickle.dumps(online))
    assert copy.clusters() == online.clusters()
    point = np.array([9.0, 1.0])
    assert copy.add(point) == online.add(point)


def test_a_point_added_after_every_point_was_removed_starts_a_new_cluster() -> None:
    X, gmm = three_blobs(per=2)
    online = OnlineGMM.from_gmm(gmm, X, tau_n=2)
    for pid in online.point_ids:
        online.remove(pid)
    assert online.params.k == 0
    assert not online.clusters()
    result = online.add(np.array([1.0, 2.0]))
    assert len(result.created) == 1
    assert result.assigned == result.created


def test_greedy_baseline_joins_the_most_probable_cluster_without_refitting() -> None:
    """The paper's greedy variant [A §6.4]: no parameter update, no split, one cluster."""
    X, gmm = three_blobs()
    online = OnlineGMM.from_gmm(gmm, X, tau_n=5, tau_c=11)
    means = online.params.means.copy()
    rng = np.random.default_rng(4)
    for _ in range(6):
        result = online.add_greedy(np.array([25.0, 25.0]) + 0.3 * rng.normal(size=2))
        assert len(result.assigned) == 1
        assert result.changed == result.assigned
        assert not result.created
        assert not result.split
    np.testing.assert_array_equal(online.params.means, means)


def test_a_batch_at_small_n_runs_one_refit_for_the_run_of_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """n ≤ τ_n: ``add_many`` refits once after the run, not once per point (each refit could
    move boundary points, and each cluster moved had its summary regenerated)."""
    X, gmm = three_blobs()
    new = np.array([[10.2, 0.1], [0.3, 9.8], [0.1, -0.2], [9.7, 0.4]])
    one_by_one = OnlineGMM.from_gmm(gmm, X, cluster_ids=[7, 8, 9], tau_n=100)
    batched = OnlineGMM.from_gmm(gmm, X, cluster_ids=[7, 8, 9], tau_n=100)
    refits = []
    monkeypatch.setattr(batched, "_refit", lambda: refits.append(OnlineGMM._refit(batched)))
    pids, results = batched.add_many(new)
    assert len(refits) == 1
    assert [r.refit for r in results] == [True]
    for x in new:
        one_by_one.add(x)
    assert pids == one_by_one.point_ids[-4:]
    assert batched.clusters() == one_by_one.clusters()  # four separated points: the same end
    assert results[0].changed == {7, 8, 9}  # each blob gained a point
    assert batched.churn == 4


def test_a_batch_crossing_tau_n_refits_the_run_then_goes_on_incrementally() -> None:
    X, gmm = three_blobs()  # 30 points
    online = OnlineGMM.from_gmm(gmm, X, cluster_ids=[7, 8, 9], tau_n=31)
    pids, results = online.add_many(np.array([[10.2, 0.1], [0.3, 9.8], [0.1, -0.2], [9.7, 0.4]]))
    assert len(pids) == 4
    assert [r.refit for r in results] == [True, False, False]  # n = 30, 31 refit; 32, 33 do not
    assert [r.point for r in results] == [-1, pids[2], pids[3]]
    assert online.n == 34


def test_a_cut_halves_a_cluster_where_em_isolates_an_outlier() -> None:
    """13 points in 10 dims, one far from the others: EM with two components gives the outlier a
    component of its own (1 + 12, no real cut); the cut halves the cluster along its principal
    axis, so both parts hold about half, each with its own component."""
    rng = np.random.default_rng(3)
    X = np.vstack([rng.standard_normal((12, 10)), 8.0 + rng.standard_normal((1, 10))])
    em = GaussianMixture(2, covariance_type="full", random_state=0).fit(X).predict(X)
    assert sorted(np.bincount(em)) == [1, 12]
    gmm = OnlineGMM(params_of(GaussianMixture(1, random_state=0).fit(X)), X, tau_c=5)
    (cid,) = gmm.members
    assert gmm.cut(cid)
    sizes = sorted(len(m) for m in gmm.members.values())
    assert len(sizes) == 2
    assert sizes[0] >= 5
    assert sum(sizes) >= 13
    assert gmm.params.k == 2
    assert cid in gmm.members  # the larger part keeps the id (and its summary node)


def test_most_probable_is_predict_probas_argmax_over_the_allowed_components() -> None:
    """The global routing of every new node: same answers as scikit-learn, without its loop
    over components (which cost ~3 ms per call against a few hundred)."""
    from ingestor.cluster.gmm import most_probable

    rng = np.random.default_rng(0)
    gmm = fit_gmm(rng.normal(size=(600, 4)), 40, random_state=0, max_iter=10)
    Y = rng.normal(size=(300, 4)) * 2
    allowed = np.sort(rng.choice(40, 30, replace=False))
    expected = np.argmax(gmm.predict_proba(Y)[:, allowed], axis=1)
    np.testing.assert_array_equal(most_probable(gmm, Y, allowed), expected)
    np.testing.assert_array_equal(most_probable(gmm, Y[:3], allowed), expected[:3])  # cached
