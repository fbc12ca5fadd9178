"""Open the state database's SQLite file the way :class:`~models_store.rows.RowStore` needs it.

Pages are 16 KiB (SQLite's default is 4 KiB): a node row (~1.5 KiB with its text) then sits in
its leaf page instead of spilling into an overflow page, so a point read is one page, not two or
three, and the database is 40 % smaller (a 199k-leaf state: 1.53 GB at 4 KiB, 0.93 GB at 16 KiB).
A database made with other pages keeps them (SQLite fixes the page size of a WAL database).

The write-ahead log is checkpointed at :data:`WAL_KEEP_BYTES`, not SQLite's 1,000 pages, and a
commit larger than that truncates it (:func:`trim_log`): a process keeps its connection open, and
closing was what removed the log. Commits are durable across a crash (``synchronous=FULL``); a new
file's directory entry is synced too (:func:`fsync_dir`).
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from pathlib import Path

from models_store.errors import CorruptModelError, ModelStoreError
from models_store.rows_format import SCHEMA, migrate

__all__ = ["PAGE_SIZE", "WAL_KEEP_BYTES", "connect", "file_identity", "fsync_dir", "trim_log"]

log = logging.getLogger(__name__)

#: Page size of a new database (see the module docstring).
PAGE_SIZE = 16384
#: The write-ahead log kept on disk between commits. A kept connection never closes, and closing
#: was what removed the log: a build's commit would leave a log as large as the database beside
#: it for the daemon's lifetime. A commit larger than this checkpoints and truncates the log.
WAL_KEEP_BYTES = 64 * 1024 * 1024


def connect(path: Path, *, created: bool, readonly: bool) -> sqlite3.Connection:
    """Open ``path`` (``created``: a new, empty file) as a state database; a writer sets the
    pragmas, migrates an older format and creates the tables.

    The connection may be shared by threads (the caller locks); it runs in autocommit mode, the
    caller opening each transaction.

    Raises:
        CorruptModelError: the file is not a SQLite database, or a damaged one.
        ModelStoreError: it cannot be opened now (a full disk, an I/O error, no permission):
            nothing was changed, and the same call succeeds once that is fixed.
    """
    uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
    try:
        db = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        if not readonly:
            if created:  # before the first table: fixed from then on
                db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA journal_size_limit={WAL_KEEP_BYTES}")
            # Checkpoint at that size, not SQLite's 1,000 pages: each checkpoint rewrites
            # every page changed since the last, and an update changes the same upper pages
            # of the B-tree again and again (265k leaves: one-document remove and edit
            # medians 0.080 -> 0.075 s, 0.095 -> 0.085 s CPU).
            db.execute(f"PRAGMA wal_autocheckpoint={WAL_KEEP_BYTES // PAGE_SIZE}")
            db.execute("PRAGMA synchronous=FULL")
            migrate(db, path)
            db.executescript(SCHEMA)
        db.execute("PRAGMA cache_size=-65536")  # 64 MiB of page cache
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "") in _DAMAGED:
            raise CorruptModelError(
                f"{path} is not a readable state database ({exc}); delete it and rebuild "
                "with `adrap build DIR`"
            ) from exc
        # A full disk, an I/O error, a permission: the file is fine, never advise deleting it.
        raise ModelStoreError(
            f"cannot open the state database {path} ({exc}); nothing was changed: check that "
            f"the disk holding it has free space ({_free_mib(path)} MiB now) and can be read "
            "and written by this user, then run the command again"
        ) from exc
    return db


#: SQLite's answers for a file that is not a database or a damaged one (all others: the file
#: cannot be used now, e.g. SQLITE_FULL, SQLITE_IOERR_*, SQLITE_CANTOPEN, SQLITE_READONLY).
_DAMAGED = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})


def _free_mib(path: Path) -> str:
    try:
        return f"{shutil.disk_usage(path.parent).free >> 20}"
    except OSError:
        return "?"


def trim_log(db: sqlite3.Connection, path: Path, written: int) -> None:
    """After a commit of ``written`` bytes over :data:`WAL_KEEP_BYTES`, checkpoint and truncate
    the write-ahead log, best effort: the commit before it is durable whatever happens here (a
    reader on an old snapshot defers it to a later one)."""
    if written <= WAL_KEEP_BYTES:
        return
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error as exc:
        log.warning("could not truncate the write-ahead log of %s: %s", path, exc)


def fsync_dir(path: Path) -> None:
    """Sync the folder ``path``, so that a file just created in it survives a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_identity(path: Path) -> tuple[int, int, int] | None:
    """The file at ``path`` as (device, inode, change time): another file (deleted and made
    again, replaced) differs even where the new file reuses the inode number."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)
