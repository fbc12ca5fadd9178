"""One connection per state database and process: SQLite's page cache outlives an open of the
state (a daemon opens it for every update), yet nothing stale is ever read through it."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from models_store import Changes, ModelStoreError, RowStore
from models_store.rows_connection import PAGE_SIZE


def put(rows: RowStore, key: str, value: bytes) -> None:
    ch = Changes()
    ch.set("ns", key, value)
    rows.commit(ch)


def test_opens_of_one_database_share_a_connection(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    writer = RowStore.shared(path, create=True)
    assert RowStore.shared(path) is writer
    reader = RowStore.shared(path, readonly=True)
    assert reader is not writer, "a read-only open never gets the writer's connection"
    assert RowStore.shared(path, readonly=True) is reader
    put(writer, "a", b"1")
    assert RowStore.shared(path) is writer, "its own commits keep the connection"
    assert reader.get("ns", "a") == b"1"


def _commit_from_another_process(path: str) -> None:
    put(RowStore(Path(path)), "b", b"from the other process")


def test_another_process_commit_is_seen_through_a_kept_connection(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    put(RowStore.shared(path, create=True), "b", b"before")
    reader = RowStore.shared(path, readonly=True)
    assert reader.get("ns", "b") == b"before"  # its page cache now holds the row
    proc = multiprocessing.get_context("spawn").Process(
        target=_commit_from_another_process, args=(str(path),)
    )
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert RowStore.shared(path, readonly=True).get("ns", "b") == b"from the other process"


def test_a_database_deleted_and_made_again_is_opened_afresh(tmp_path: Path) -> None:
    """The new file may even get the old one's inode number: its change time tells them apart."""
    path = tmp_path / "s.sqlite"
    old = RowStore.shared(path, create=True)
    put(old, "k", b"old tree")
    reader = RowStore.shared(path, readonly=True)
    assert reader.get("ns", "k") == b"old tree"
    for extra in ("", "-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    with pytest.raises(ModelStoreError, match="no state database"):
        RowStore.shared(path, readonly=True)
    new = RowStore.shared(path, create=True)
    assert new is not old
    put(new, "k", b"new tree")
    assert RowStore.shared(path, readonly=True).get("ns", "k") == b"new tree"
    assert RowStore.shared(path).get("ns", "k") == b"new tree"


def test_a_closed_store_is_not_handed_out_again(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    first = RowStore.shared(path, create=True)
    first.close()
    again = RowStore.shared(path)
    assert again is not first
    put(again, "x", b"y")


def test_a_new_database_has_large_pages(tmp_path: Path) -> None:
    """A ~1.5 KiB node row fits its leaf page (no overflow page per read)."""
    path = tmp_path / "s.sqlite"
    put(RowStore(path, create=True), "k", b"v")
    (size,) = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()
    assert size == PAGE_SIZE == 16384


def test_a_large_commit_leaves_no_large_log_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept connection never closes: the log a build's commit grew is truncated by the commit,
    not left beside the database (as large as it) for the daemon's lifetime."""
    import models_store.rows_connection as connection

    monkeypatch.setattr(connection, "WAL_KEEP_BYTES", 256 * 1024)
    path = tmp_path / "s.sqlite"
    rows = RowStore.shared(path, create=True)
    ch = Changes()
    for i in range(400):
        ch.set("ns", str(i), bytes(4096))
    rows.commit(ch)  # ~1.6 MB: more than the log may keep
    assert RowStore.shared(path) is rows, "the connection is still open"
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size <= 256 * 1024
    assert rows.count("ns") == 400


class _FailingCheckpoint:
    """A connection whose log truncation fails (the commit before it has succeeded)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if "wal_checkpoint" in sql:
            raise sqlite3.OperationalError("database table is locked")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)


def test_a_failed_log_truncation_does_not_fail_the_commit_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import models_store.rows_connection as connection

    monkeypatch.setattr(connection, "WAL_KEEP_BYTES", 1024)
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    rows._db = _FailingCheckpoint(rows._db)  # type: ignore[assignment]
    put(rows, "k", bytes(4096))  # committed: the truncation after it is best effort
    assert RowStore(tmp_path / "s.sqlite", readonly=True).get("ns", "k") == bytes(4096)


def test_eviction_counts_a_namespace_only_when_it_may_be_over_its_bound(tmp_path: Path) -> None:
    """The count behind eviction reads every entry of the namespace; it runs only when the rows
    put since the last count (or another connection's commit) may have passed the bound."""
    path = tmp_path / "s.sqlite"
    rows = RowStore(path, create=True)
    counts: list[str] = []
    rows._db.set_trace_callback(lambda sql: counts.append(sql) if "count(*)" in sql else None)

    def put_many(store: RowStore, start: int, n: int, stamp: int) -> None:
        ch = Changes()
        for i in range(start, start + n):
            ch.set("cache", f"k{i:04d}", b"x")
        store.commit(ch, stamp=stamp)

    put_many(rows, 0, 80, stamp=1)
    assert rows.evict_oldest("cache", keep=100) == 0
    assert len(counts) == 1  # the first call counts: no bound known yet
    put_many(rows, 80, 15, stamp=2)  # 95 at most: within the bound, no count
    assert rows.evict_oldest("cache", keep=100) == 0
    assert len(counts) == 1
    put_many(rows, 95, 15, stamp=3)  # 110 at most: count, then cut down to 90
    assert rows.evict_oldest("cache", keep=100, down_to=90) == 20
    assert len(counts) == 2
    assert len(list(rows.items("cache"))) == 90
    assert sorted(k for k, _ in rows.items("cache"))[0] == "k0020", "the oldest stamps went"
    put_many(rows, 20, 5, stamp=4)  # kept rows written again count as new ones: 95 at most
    assert rows.evict_oldest("cache", keep=100, down_to=90) == 0
    assert len(counts) == 2
    other = RowStore(path)  # another connection's commit voids the bound
    put_many(other, 200, 30, stamp=5)
    other.close()
    assert rows.evict_oldest("cache", keep=100, down_to=90) == 30
    assert len(counts) == 3
    assert len(list(rows.items("cache"))) == 90
    rows.close()


def test_keys_prefix_reads_at_most_limit_keys_in_order(tmp_path: Path) -> None:
    """A change of model reads its marks a batch at a time: the first ``limit`` keys of the
    prefix, not every mark on each step."""
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    ch = Changes()
    for key in ("dirty:c", "dirty:a", "dirty:b", "cursor", "dirtx"):
        ch.set("ns", key, b"")
    rows.commit(ch)
    assert rows.keys_prefix("ns", "dirty:") == ["dirty:a", "dirty:b", "dirty:c"]
    assert rows.keys_prefix("ns", "dirty:", limit=2) == ["dirty:a", "dirty:b"]
