"""An online GMM in the state database by parts: exact round trips, and commits that write what an
update changed (issue 8: bytes per one-document commit independent of the tree's size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingestor.cluster.em import fit_gmm
from ingestor.cluster.gmm import params_of
from ingestor.cluster.online_gmm import OnlineGMM
from ingestor.tree.group_rows import PACK_MIN, PACK_SHARE, GroupMap, pack, unpack
from ingestor.tree.rowmap import Clock, dumps, loads
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
    m = GroupMap("L0.gmms", Clock())
    m.bind(rows)
    return m


def stored(tmp_path: Path, g: OnlineGMM) -> RowStore:
    """A new state database holding ``g`` as group 0 of layer 0, committed."""
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    m = GroupMap("L0.gmms", Clock())
    m.bind(rows)
    m["0"] = g
    commit(m, rows)
    return rows


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
    m = GroupMap("L0.gmms", Clock())
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
        g = loaded.edit(key)
        g.add(np.full(10, 1.5))  # n > tau_n: one incremental M-step, the point joins a cluster
        written[key] = commit(loaded, rows)
        same(reopen(rows)[key], g)
    # A pickled group grew with its points (80 bytes each, twice that with the buffer's spare
    # capacity) and its components; by parts, the big group's commit is the head (a few bytes a
    # point) and the point and components it moved.
    assert written["1"] < first / 10
    assert written["1"] < 10 * written["0"]


def test_a_removed_point_and_a_dropped_component_leave_the_database(tmp_path: Path) -> None:
    g = group(400)
    rows = stored(tmp_path, g)
    loaded = reopen(rows)["0"]
    victims = sorted(loaded.clusters().items(), key=lambda kv: len(kv[1]))[0][1]
    for pid in victims:  # empties the smallest cluster: its component is dropped
        loaded.remove(pid)
    m2 = reopen(rows)
    m2["0"] = loaded
    commit(m2, rows)
    same(reopen(rows)["0"], loaded)
    singles, blocked = stored_points(rows, "0")
    assert set(loaded.point_ids) <= set(singles) | set(blocked)
    assert not set(singles) - set(loaded.point_ids), "a removed point's own row is deleted"
    stale = len(blocked) - len(set(blocked) & set(loaded.point_ids))
    assert stale <= max(PACK_MIN, loaded.n // PACK_SHARE), "removed points are packed away"
    assert len(rows.items_prefix("L0.gmms.comp", "0/")) == loaded.params.k


def stored_points(rows: RowStore, key: str) -> tuple[list[int], list[int]]:
    """The point ids group ``key`` has as single rows, and those its blocks hold."""
    singles = [int(k.rsplit("/", 1)[1]) for k in rows.keys_prefix("L0.gmms.pts", key + "/")]
    blocked = [
        int(pid)
        for _, blob in rows.items_prefix("L0.gmms.blk", key + "/")
        for pid in unpack(blob)[0]
    ]
    return sorted(singles), sorted(blocked)


def test_a_group_is_read_from_a_block_and_the_points_added_since(tmp_path: Path) -> None:
    """Reading a group of n points read n point rows (265k synthetic leaves: ~2,600 rows per
    one-document remove); now one block plus the points added since its last pack."""
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    g = group(400)
    m = GroupMap("L0.gmms", Clock())
    m.bind(rows)
    m["0"] = g
    first = commit(m, rows)
    assert stored_points(rows, "0") == ([], sorted(g.point_ids)), "a new group is one block"
    loaded = reopen(rows)
    rng = np.random.default_rng(1)
    sizes, packed = [], 0
    for step in range(400):  # one point a commit, until a pack was due and done
        gm = loaded.edit("0")
        gm.add(rng.normal(1.5, 0.3, size=10))
        sizes.append(commit(loaded, rows))
        singles, blocked = stored_points(rows, "0")
        assert len(singles) <= max(PACK_MIN, gm.n // PACK_SHARE)
        assert sorted(singles + blocked) == sorted(gm.point_ids)
        packed += not singles
        if step % 25 == 0:
            same(reopen(rows)["0"], gm)
        if packed:
            break
    assert packed, "the points added since the group's block were packed with it"
    assert max(sizes) > first / 2, "a pack rewrote the group's points once"
    assert np.median(sizes) < first / 5, "the other commits wrote a point and the head"
    same(reopen(rows)["0"], gm)


def test_a_group_stored_a_row_a_point_is_read_and_packed_by_its_next_commit(
    tmp_path: Path,
) -> None:
    """State format 2 kept each point in a row of its own: read as before, packed when written."""
    g = group(400)
    rows = stored(tmp_path, g)
    ch = Changes()
    for bkey, blob in rows.items_prefix("L0.gmms.blk", "0/"):  # as format 2 wrote it
        ch.remove("L0.gmms.blk", bkey)
        for pid, x in zip(*unpack(blob), strict=True):
            ch.set("L0.gmms.pts", f"0/{pid}", x.tobytes())
    rows.commit(ch)
    assert stored_points(rows, "0") == (sorted(g.point_ids), [])
    loaded = reopen(rows)
    same(loaded["0"], g)
    loaded.edit("0").add(np.full(10, 1.5))
    commit(loaded, rows)
    assert stored_points(rows, "0") == ([], sorted(loaded["0"].point_ids))
    same(reopen(rows)["0"], loaded["0"])


def test_a_row_of_a_point_the_group_no_longer_has_is_ignored_and_deleted(tmp_path: Path) -> None:
    g = group(400)
    rows = stored(tmp_path, g)
    ch = Changes()
    ch.set("L0.gmms.pts", "0/9999", np.zeros(10).tobytes())  # no such point in the group
    rows.commit(ch)
    loaded = reopen(rows)
    same(loaded["0"], g)
    loaded.edit("0").add(np.full(10, 1.5))
    commit(loaded, rows)
    singles, _ = stored_points(rows, "0")
    assert 9999 not in singles
    same(reopen(rows)["0"], loaded["0"])


def test_a_block_round_trips_ids_and_points() -> None:
    ids = np.array([3, 7, 11], dtype=np.int64)
    X = np.arange(30, dtype=np.float64).reshape(3, 10) / 7
    got_ids, got_X = unpack(pack(ids, X))
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got_X, X)


def test_a_group_given_a_new_model_is_written_whole(tmp_path: Path) -> None:
    """A refit installs a new OnlineGMM whose point ids restart: same ids, other points."""
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    m = GroupMap("L0.gmms", Clock())
    m.bind(rows)
    m["0"] = group(400)
    commit(m, rows)
    loaded = reopen(rows)
    loaded["0"]
    refitted = group(200, seed=5)  # point ids 0..199 again, at other positions
    loaded["0"] = refitted
    commit(loaded, rows)
    same(reopen(rows)["0"], refitted)
    unread = reopen(rows)  # a new model over a group this process never read
    unread["0"] = again = group(100, seed=6)
    commit(unread, rows)
    same(reopen(rows)["0"], again)
    assert stored_points(rows, "0") == ([], sorted(again.point_ids)), "nothing stale is left"


def test_a_group_written_before_a_field_existed_loads_with_its_default(tmp_path: Path) -> None:
    """Rows written by an older adrap lack newer OnlineGMM fields; __setstate__ fills them in."""
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    g = group(400)
    m = GroupMap("L0.gmms", Clock())
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
