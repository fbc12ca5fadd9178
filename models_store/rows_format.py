"""The state database's table layout (its format) and the move of an older format to it."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

from models_store.errors import ModelStoreError

log = logging.getLogger(__name__)

__all__ = ["READABLE_FORMATS", "ROWS_FORMAT", "SCHEMA", "migrate"]

#: Format of the database itself (tables); a different one is refused with a rebuild hint.
#: 1: ``rows`` WITHOUT ROWID, keyed by ``(ns, key)``; 2: a rowid table with a unique index on
#: ``(ns, key)``. Both are read by the same statements; a writer migrates 1 to 2 on open.
ROWS_FORMAT = 2
READABLE_FORMATS = frozenset({1, 2})

# Why a rowid table: a WITHOUT ROWID table is a B-tree of whole rows, so its interior pages hold
# copies of rows, and SQLite reads a spilled row whole to compare a key with it. Local UMAP models
# (up to 2 MB each) sit next to the point and node maps in key order, so at 265k leaves every
# lookup of such a row read megabytes: 0.5-1.7 ms per row read or written, against ~10 us with
# the rows in a rowid table and only (ns, key, rowid) in the index.
SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    id    INTEGER PRIMARY KEY,
    ns    TEXT    NOT NULL,
    key   TEXT    NOT NULL,
    value BLOB    NOT NULL,
    stamp INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS rows_key ON rows (ns, key);
CREATE INDEX IF NOT EXISTS rows_stamp ON rows (ns, stamp);
CREATE TABLE IF NOT EXISTS manifest (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Move a format-1 database's rows into the format-2 table, in one transaction."""
    row = db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'rows'"
    ).fetchone()
    if row is None or "WITHOUT ROWID" not in row[0].upper():
        return
    log.info("moving the rows of %s to the rowid layout (format 2, once)", path)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("DROP INDEX IF EXISTS rows_stamp")
        db.execute("ALTER TABLE rows RENAME TO rows_v1")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(
            "INSERT INTO rows (ns, key, value, stamp) "
            "SELECT ns, key, value, stamp FROM rows_v1 ORDER BY ns, key"
        )
        db.execute("DROP TABLE rows_v1")
        db.execute(
            "UPDATE manifest SET value = ? WHERE key = 'rows_format'", (json.dumps(ROWS_FORMAT),)
        )
        db.execute("COMMIT")
    except BaseException as exc:
        if db.in_transaction:
            db.execute("ROLLBACK")
        if not isinstance(exc, sqlite3.Error):
            raise
        raise ModelStoreError(
            f"cannot move the tree state in {path} to the current database format: {exc}; check "
            "free space (the move needs the database's size again) and run the command again"
        ) from exc
    try:  # give the old table's pages back to the disk (best effort: they are reused anyway)
        db.execute("VACUUM")
    except sqlite3.Error as exc:
        log.warning("could not compact %s after moving its rows: %s", path, exc)
