"""An online GMM in the state database by parts: exact round trips, and commits that write what an
update changed (issue 8: bytes per one-document commit independent of the tree's size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingestor.cluster.gmm import fit_gmm, params_of
from ingestor.cluster.online_gmm import OnlineGMM
from ingestor.tree.group_rows import GroupMap
from ingestor.tree.rowmap import dumps, loads
from models_store import Changes, RowStore


def group(n: int, seed: int = 0) -> OnlineGMM:
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(c, 0.3, size=(n // 4, 10)) for c in range(4)])
    return OnlineGMM(params_of(fit_gmm(X, 4, random_state=0)), X, tau_n=100, random_state=0)


def commit(m: GroupMap, rows: RowStore) -> int:
    ch = Changes()
    m.changes(ch)
    written = rows.commit(ch)
    m.committed()
    return written


def reopen(rows: RowStore) -> GroupMap:
    m = GroupMap("L0.gmms")
    m.bind(rows)
    return m


def same(a: OnlineGMM, b: OnlineGMM) -> None:
    assert a.point_ids == b.point_ids
    np.testing.assert_array_equal(a.points, b.points)
    np.testing.assert_array_equal(a.params.weights, b.params.weights)
    np.testing.assert_array_equal(a.params.means, b.params.means)
    np.testing.assert_array_equal(a.params.covariances, b.params.covariances)
    assert a.cluster_ids == b.cluster_ids
    assert a.clusters() == b.clusters()
    assert a.offered == b.offered


def test_a_group_round_trips_exactly_and_adding_a_point_writes_the_point_not_the_group(
    tmp_path: Path,
) -> None:
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    small, big = group(400), group(4000, seed=1)
    m = GroupMap("L0.gmms")
    m.bind(rows)
    m["0"], m["1"], m["2"] = small, big, None
    first = commit(m, rows)
    loaded = reopen(rows)
    same(loaded["0"], small)
    same(loaded["1"], big)
    assert loaded["2"] is None

    assert commit(loaded, rows) == 0, "groups read and left as they were write nothing"
    written = {}
    for key in ("0", "1"):
        g = loaded[key]
        g.add(np.full(10, 1.5))  # n > tau_n: one incremental M-step, the point joins a cluster
        written[key] = commit(loaded, rows)
        same(reopen(rows)[key], g)
    # A pickled group grew with its points (80 bytes each, twice that with the buffer's spare
    # capacity) and its components; by parts, the big group's commit is the head (a few bytes a
    # point) and the point and components it moved.
    assert written["1"] < first / 10
    assert written["1"] < 10 * written["0"]


def test_a_removed_point_and_a_dropped_component_leave_the_database(tmp_path: Path) -> None:
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    g = group(400)
    m = GroupMap("L0.gmms")
    m.bind(rows)
    m["0"] = g
    commit(m, rows)
    loaded = reopen(rows)["0"]
    victims = sorted(loaded.clusters().items(), key=lambda kv: len(kv[1]))[0][1]
    for pid in victims:  # empties the smallest cluster: its component is dropped
        loaded.remove(pid)
    m2 = reopen(rows)
    m2["0"] = loaded
    commit(m2, rows)
    same(reopen(rows)["0"], loaded)
    keys = [k for k, _ in rows.items_prefix("L0.gmms.pts", "0/")]
    assert len(keys) == loaded.n
    assert len(rows.items_prefix("L0.gmms.comp", "0/")) == loaded.params.k


def test_a_group_given_a_new_model_is_written_whole(tmp_path: Path) -> None:
    """A refit installs a new OnlineGMM whose point ids restart: same ids, other points."""
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    m = GroupMap("L0.gmms")
    m.bind(rows)
    m["0"] = group(400)
    commit(m, rows)
    loaded = reopen(rows)
    loaded["0"]
    refitted = group(200, seed=5)  # point ids 0..199 again, at other positions
    loaded["0"] = refitted
    commit(loaded, rows)
    same(reopen(rows)["0"], refitted)


def test_a_group_written_before_a_field_existed_loads_with_its_default(tmp_path: Path) -> None:
    """Rows written by an older adrap lack newer OnlineGMM fields; __setstate__ fills them in."""
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    g = group(400)
    m = GroupMap("L0.gmms")
    m.bind(rows)
    m["0"] = g
    ch = Changes()
    m.changes(ch)
    head = loads(ch.put[("L0.gmms", "0")])
    assert isinstance(head, dict)
    del head["churn"], head["fitted"]  # as written before group refits were counted
    ch.put[("L0.gmms", "0")] = dumps(head)
    rows.commit(ch)
    loaded = reopen(rows)["0"]
    assert (loaded.churn, loaded.fitted) == (0, loaded.n)
