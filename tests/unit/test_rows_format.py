"""The state database's table layout (format 2) and the move of a format-1 database to it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from models_store import Changes
from models_store.rows import ROWS_FORMAT, RowStore

V1_SCHEMA = """
CREATE TABLE rows (
    ns TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, stamp INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE INDEX rows_stamp ON rows (ns, stamp);
CREATE TABLE manifest (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def table_sql(path: Path) -> str:
    with sqlite3.connect(path) as db:
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'rows'").fetchone()
    return str(sql)


def test_rows_live_in_a_rowid_table_so_lookups_never_read_whole_blobs(tmp_path: Path) -> None:
    """In a WITHOUT ROWID table, interior B-tree pages hold copies of whole rows and SQLite reads a
    spilled row whole to compare keys with it: with 2 MB UMAP models next to the node maps, every
    lookup read megabytes (0.5 ms a row at 265k leaves; 7 us in a rowid table)."""
    store = RowStore(tmp_path / "s.sqlite", create=True)
    ch = Changes()
    ch.set("L0.local", "0", b"\0" * 3_000_000)
    ch.set("L0.node_at", "0/1", b"n1")
    ch.manifest["tree"] = "t"
    store.commit(ch)
    assert "WITHOUT ROWID" not in table_sql(store.path).upper()
    assert store.get_many("L0.node_at", ["0/1", "0/2"]) == {"0/1": b"n1"}
    assert store.manifest()["rows_format"] == ROWS_FORMAT == 2


def test_a_format_1_database_is_read_as_it_is_and_moved_by_the_first_writer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(V1_SCHEMA)
        db.executemany(
            "INSERT INTO rows VALUES (?, ?, ?, ?)",
            [("node", f"n{i}", f"v{i}".encode(), i) for i in range(50)]
            + [("L0.local", "0", b"\1" * 100_000, 3)],
        )
        db.execute("INSERT INTO manifest VALUES ('rows_format', '1'), ('tree', '\"t\"')")
    reader = RowStore(path, readonly=True)
    reader.check({"tree": "t"})  # readable: the same statements work on both layouts
    assert reader.get("node", "n7") == b"v7"
    reader.close()
    assert "WITHOUT ROWID" in table_sql(path).upper(), "a reader must not change the file"

    writer = RowStore(path)
    assert "WITHOUT ROWID" not in table_sql(path).upper()
    assert dict(writer.items("node")) == {f"n{i}": f"v{i}".encode() for i in range(50)}
    assert writer.get("L0.local", "0") == b"\1" * 100_000
    assert writer.manifest() == {"rows_format": 2, "tree": "t"}
    writer.check({"tree": "t"})
    assert writer.evict_oldest("node", keep=45) == 5  # stamps came along: n0..n4 were oldest
    assert sorted(dict(writer.items("node"))) == sorted(f"n{i}" for i in range(5, 50))
    writer.close()
    RowStore(path).close()  # opened again: nothing left to move
    assert "rows_v1" not in {
        name for (name,) in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")
    }


def test_the_log_is_checkpointed_at_its_kept_size_not_sqlites_1000_pages(tmp_path: Path) -> None:
    """Each checkpoint rewrites every page changed since the last; updates change the same upper
    pages of the B-tree each time, so checkpoints are made as rare as the kept log allows."""
    from models_store.rows_connection import PAGE_SIZE, WAL_KEEP_BYTES

    store = RowStore(tmp_path / "s.db", create=True)
    for i in range(24):  # 24 commits of ~1 MB: past SQLite's default (1,000 pages = 16 MB)
        changes = Changes()
        for j in range(64):
            changes.set("ns", f"{i}-{j}", bytes([i]) * (PAGE_SIZE - 200))
        store.commit(changes)
    wal = tmp_path / "s.db-wal"
    assert 22 * 1024 * 1024 < wal.stat().st_size <= WAL_KEEP_BYTES
    store.close()


def test_a_row_written_again_is_updated_in_place_and_only_stamped_namespaces_carry_the_stamp(
    tmp_path: Path,
) -> None:
    """``INSERT OR REPLACE`` deletes a row and inserts it at a new rowid, and every row carried
    the generation: rewriting one touched its old table page, both index entries and a new page.
    In place, a commit writes about the pages that hold the rows it changes."""
    import random

    store = RowStore(tmp_path / "s.db", create=True)
    rng = random.Random(0)
    keys = [f"{rng.getrandbits(64):016x}" for _ in range(20_000)]  # node ids: no key order
    first = Changes()
    for k in keys:
        first.set("node", k, bytes(1000))
        first.set("cache", k, b"summary")
    store.commit(first, stamp=1, stamped={"cache"})
    rowid = dict(store._db.execute("SELECT key, id FROM rows WHERE ns = 'node'").fetchall())
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    again = Changes()
    chosen = rng.sample(keys, 60)
    for k in chosen:
        again.set("node", k, bytes(1001))
        again.set("cache", k, b"summary again")
    store.commit(again, stamp=2, stamped={"cache"})
    (_, frames, _) = store._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    # 96 pages here; 162 with INSERT OR REPLACE and every row stamped
    assert frames <= len(again.put), f"{frames} pages written for {len(again.put)} rows rewritten"
    now = dict(store._db.execute("SELECT key, id FROM rows WHERE ns = 'node'").fetchall())
    assert all(now[k] == rowid[k] for k in chosen), "a row written again keeps its rowid"
    stamps = dict(store._db.execute("SELECT ns || '/' || key, stamp FROM rows").fetchall())
    assert {stamps[f"node/{k}"] for k in keys} == {0}
    assert {stamps[f"cache/{k}"] for k in chosen} == {2}
    assert store.get("node", chosen[0]) == bytes(1001)
    evicted = store.evict_oldest("cache", keep=100)
    kept = {k for k, _ in store.items("cache")}
    assert evicted == 19_900
    assert set(chosen) <= kept, "the least recently stamped rows went"
