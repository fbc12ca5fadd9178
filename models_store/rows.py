"""An incremental, crash-atomic row store: one SQLite database (WAL) per tree state.

A tree's state is many small rows (nodes, source entries, cached summaries, cluster memberships)
and a few blobs (fitted models), of which one update changes a handful. :class:`RowStore` keeps
them as ``(namespace, key) -> bytes`` rows and writes every change of an update in one
transaction, so a commit costs what the update changed, not what the tree holds (a whole-state
pickle cost 9.9 s per one-document add at 80k leaves).

Why SQLite: it is in the standard library, a transaction is atomic and durable across a crash
(``synchronous=FULL``), and in WAL mode readers (``adrap status``, a query) read the last
committed snapshot while the writer works, without blocking it and without seeing a torn state.

Rows of a bounded namespace (the summary cache) carry a ``stamp`` (the generation that last wrote
or used them), indexed per namespace, so it evicts its least recently used rows cheaply; other
rows keep stamp 0. A row written again is updated where it is (an upsert keeps its rowid), so its
entries in both indexes stay put and the commit writes the page that holds it, not three: with
``INSERT OR REPLACE`` and every row stamped, a 265k-leaf state wrote 7.1 MB of log per 200-row
commit (7.6 ms CPU), in place and unstamped 4.8 MB (5.6 ms). How the file is opened (page size,
log size, durability) is :mod:`models_store.rows_connection`.

A process keeps one connection per database (:meth:`RowStore.shared`), so SQLite's page cache
outlives an update: a daemon opens the state for every update, and each fresh connection read the
B-tree's inner pages again (600 random node reads at 200k leaves: 28-50 ms cold, 6-30 warm).
SQLite itself discards the cache when another process commits; a file deleted or replaced under
the path is noticed by its identity (device, inode, change time) and opened afresh.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from models_store.changes import Changes
from models_store.errors import IncompatibleModelError, ModelStoreError
from models_store.manifest import library_changes, library_versions
from models_store.rows_connection import connect, file_identity, fsync_dir, trim_log
from models_store.rows_format import READABLE_FORMATS, ROWS_FORMAT

log = logging.getLogger(__name__)

#: Keys IN (...) per statement (SQLite's default limit on host parameters is 32766).
_CHUNK = 900
#: Connections a process keeps open (:meth:`RowStore.shared`), least recently used dropped first.
_SHARED_KEEP = 8


def _prefix_range(prefix: str) -> tuple[str, str | None]:
    """The keys starting with ``prefix``: ``[prefix, prefix with its last character
    incremented)`` (every key where ``prefix`` is empty)."""
    if not prefix:
        return "", None
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


class RowStore:
    """One SQLite database of ``(namespace, key) -> bytes`` rows plus a JSON manifest.

    Args:
        path: the database file; its folder is created when ``create`` is true.
        create: create the database if missing (writers); readers pass False and get
            ``ModelStoreError`` for a missing file instead of an empty database.
        readonly: open read-only (``status``, queries): never creates or changes anything.

    The connection is shared by the threads of one process under a lock; other processes open
    their own. Values are opaque bytes: the caller chooses the encoding.
    """

    def __init__(self, path: Path, *, create: bool = False, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        if not self.path.exists():
            if readonly or not create:
                raise ModelStoreError(f"no state database at {self.path}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = True
        else:
            created = False
        self._db = connect(self.path, created=created, readonly=readonly)
        # Closed when the store is dropped: a state opened and forgotten holds no connection open.
        weakref.finalize(self, self._db.close)
        if created:
            fsync_dir(self.path.parent)  # the new file's directory entry survives a crash
        self.closed = False
        self._identity = file_identity(self.path)
        #: Per namespace, an upper bound of its rows (from a count, plus every row put since)
        #: and the database's data_version then: evict_oldest counts only when it may be over.
        self._bounds: dict[str, tuple[int, int]] = {}

    @classmethod
    def shared(cls, path: Path, *, create: bool = False, readonly: bool = False) -> RowStore:
        """Return this process's open store of ``path`` (same arguments as the constructor),
        opening it on first use or when the file at ``path`` is not the one it holds open.

        Keeping the connection keeps SQLite's page cache across the opens of a state (a daemon
        opens it for every update). It is safe across processes: SQLite discards the cache when
        another connection commits. A store from here must not be closed by its users.
        """
        key = (os.getpid(), str(Path(path).absolute()), readonly)
        with _SHARED_LOCK:
            got = _SHARED.get(key)
            if got is not None and not got.closed and got._identity == file_identity(got.path):
                _SHARED.move_to_end(key)
                return got
            _SHARED.pop(key, None)
            store = cls(path, create=create, readonly=readonly)
            _SHARED[key] = store
            while len(_SHARED) > _SHARED_KEEP:
                _SHARED.popitem(last=False)  # closed once its last user drops it
            return store

    # -- manifest --------------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        """Return every manifest entry (JSON-decoded)."""
        with self._lock:
            try:
                rows = self._db.execute("SELECT key, value FROM manifest").fetchall()
            except sqlite3.OperationalError as exc:  # a reader between create and first schema
                raise ModelStoreError(
                    f"the state database {self.path} is not initialised yet ({exc}): a first "
                    "build is starting; run the command again in a moment"
                ) from exc
        return {k: json.loads(v) for k, v in rows}

    def check(self, expect: Mapping[str, Any]) -> None:
        """Refuse a database written by another format or another setup (``expect``: the embedding
        model and dimension).

        Other versions of the clustering libraries are no reason to refuse: the rows (the tree,
        its summaries, the summary cache) are not their pickles, and a fitted model that cannot be
        read is refitted (see :data:`~models_store.manifest.PINNED_LIBRARIES`); they are logged.

        Raises:
            IncompatibleModelError: the message names each difference and how to rebuild.
        """
        have = self.manifest()
        bad = []
        if have.get("rows_format", ROWS_FORMAT) not in READABLE_FORMATS:
            bad.append(f"database format {have.get('rows_format')} vs {ROWS_FORMAT}")
        for key, want in expect.items():
            if key in have and have[key] != want:
                bad.append(f"{key} {have[key]!r} (stored) vs {want!r} (configured)")
        if bad:
            raise IncompatibleModelError(
                f"the tree state in {self.path} was written for another setup: "
                + "; ".join(bad)
                + "; restore the previous configuration, or rebuild the tree with `adrap build "
                "DIR` into another state directory (ADRAP_STATE_DIR) and node store. This state "
                "and its summary cache (the summaries paid for) stay here, untouched, until you "
                "delete them; the cache does not depend on the embedding model, but that build "
                "does not read it: it pays for its summaries again"
            )
        changed = library_changes(have.get("libraries") or {})
        if changed:
            log.info(
                "the tree state in %s was written with other library versions (%s); fitted "
                "models that cannot be read are refitted",
                self.path,
                "; ".join(changed),
            )

    # -- reads -----------------------------------------------------------------------------------

    def get(self, ns: str, key: str) -> bytes | None:
        """Return one row's value, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM rows WHERE ns = ? AND key = ?", (ns, key)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def get_many(self, ns: str, keys: Iterable[str]) -> dict[str, bytes]:
        """Return the values of those of ``keys`` that exist."""
        out: dict[str, bytes] = {}
        todo = list(keys)
        with self._lock:
            for start in range(0, len(todo), _CHUNK):
                part = todo[start : start + _CHUNK]
                marks = ",".join("?" * len(part))
                for k, v in self._db.execute(
                    f"SELECT key, value FROM rows WHERE ns = ? AND key IN ({marks})", (ns, *part)
                ):
                    out[k] = bytes(v)
        return out

    def items_prefix(self, ns: str, prefix: str) -> list[tuple[str, bytes]]:
        """Return the ``(key, value)`` rows of a namespace whose key starts with ``prefix``, in key
        order (one index range scan: the cost of those rows, not of the namespace)."""
        if not prefix:
            return list(self.items(ns))
        return [(k, bytes(v)) for k, v in self._range("key, value", ns, *_prefix_range(prefix))]

    def keys_prefix(self, ns: str, prefix: str, *, limit: int | None = None) -> list[str]:
        """Return the keys of a namespace that start with ``prefix``, in order, at most ``limit``
        (one index range scan, no value read: the cost of those keys, not of the namespace)."""
        return [k for (k,) in self._range("key", ns, *_prefix_range(prefix), limit=limit)]

    def items_range(
        self,
        ns: str,
        start: str = "",
        end: str | None = None,
        *,
        limit: int | None = None,
        descending: bool = False,
    ) -> list[tuple[str, bytes]]:
        """Return the rows of ``ns`` with ``start <= key < end`` (``end`` None: no upper end),
        in key order or ``descending``, at most ``limit`` of them: one index range scan that
        reads those rows only (a log keyed by time answers "since Monday" this way)."""
        rows = self._range("key, value", ns, start, end, limit=limit, descending=descending)
        return [(k, bytes(v)) for k, v in rows]

    def _range(
        self,
        columns: str,
        ns: str,
        start: str,
        end: str | None,
        *,
        limit: int | None = None,
        descending: bool = False,
    ) -> list[Any]:
        """Select ``columns`` of the rows of ``ns`` with ``start <= key < end`` (None: no upper
        end), in key order (``descending``: newest key first), at most ``limit``."""
        where, args = "ns = ? AND key >= ?", [ns, start]
        if end is not None:
            where += " AND key < ?"
            args.append(end)
        order = "DESC" if descending else "ASC"
        tail = "" if limit is None else f" LIMIT {int(limit)}"
        with self._lock:
            return self._db.execute(
                f"SELECT {columns} FROM rows WHERE {where} ORDER BY key {order}{tail}", args
            ).fetchall()

    def items(self, ns: str) -> Iterator[tuple[str, bytes]]:
        """Yield every ``(key, value)`` of a namespace, in pages (O(namespace))."""
        after = ""
        while True:
            with self._lock:
                page = self._db.execute(
                    "SELECT key, value FROM rows WHERE ns = ? AND key > ? ORDER BY key LIMIT 2048",
                    (ns, after),
                ).fetchall()
            if not page:
                return
            for k, v in page:
                yield k, bytes(v)
            after = page[-1][0]

    def count(self, ns: str) -> int:
        """Return the number of rows of a namespace."""
        with self._lock:
            (n,) = self._db.execute("SELECT count(*) FROM rows WHERE ns = ?", (ns,)).fetchone()
        return int(n)

    # -- writes ----------------------------------------------------------------------------------

    def commit(
        self,
        changes: Changes,
        *,
        stamp: int = 0,
        stamped: Collection[str] | None = None,
        fill: Callable[[Changes], None] | None = None,
    ) -> int:
        """Apply ``changes`` in one transaction (all or nothing); return the bytes written.

        ``stamp`` is written into the rows put and touched in the namespaces ``stamped`` (None:
        all of them); rows of other namespaces get 0, so writing one again never moves its entry
        of the stamp index (see the module docstring).

        ``fill``, if given, is called with ``changes`` once the transaction is open: with
        ``changes.spill_rows`` (or ``spill_bytes``) set, what it gathers is written each time
        that many rows (bytes) are put, in the order gathered (clears, then deletes, then puts
        of each part), and let go, so a commit of a whole tree never holds all its rows at once
        (26.5k leaves: +212 MiB of anonymous memory gathered whole). A spilled part reads back
        as written: ``fill`` must not read a namespace a part cleared (a fresh state, read from
        memory only, is safe).

        Raises:
            ModelStoreError: the database is read-only, full, or failed; nothing was written.
        """
        if self.readonly:
            raise ModelStoreError(f"{self.path} is open read-only")
        written = 0

        def write(part: Changes) -> None:
            nonlocal written
            for ns in part.clear:
                self._db.execute("DELETE FROM rows WHERE ns = ?", (ns,))
                self._bounds.pop(ns, None)
            if part.delete:
                self._db.executemany(
                    "DELETE FROM rows WHERE ns = ? AND key = ?", sorted(part.delete)
                )
            if part.put:
                self._db.executemany(
                    "INSERT INTO rows (ns, key, value, stamp) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (ns, key) DO UPDATE SET "
                    "value = excluded.value, stamp = excluded.stamp",
                    (
                        (ns, k, v, stamp if stamped is None or ns in stamped else 0)
                        for (ns, k), v in part.put.items()
                    ),
                )
                written += sum(len(v) for v in part.put.values())
                for ns, _ in part.put:
                    if ns in self._bounds:
                        bound, version = self._bounds[ns]
                        self._bounds[ns] = (bound + 1, version)

        def spill(part: Changes) -> None:
            write(part)
            part.touch -= part.put.keys() | part.delete
            part.clear, part.delete, part.put, part.put_bytes = set(), set(), {}, 0

        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                if fill is not None:
                    changes.spill = spill
                    try:
                        fill(changes)
                    finally:
                        changes.spill = None
                write(changes)
                touch = changes.touch - changes.put.keys() - changes.delete
                if stamped is not None:
                    touch = {(ns, k) for ns, k in touch if ns in stamped}
                if touch:
                    self._db.executemany(
                        "UPDATE rows SET stamp = ? WHERE ns = ? AND key = ?",
                        [(stamp, ns, k) for ns, k in touch],
                    )
                manifest = dict(changes.manifest)
                if manifest:
                    manifest.setdefault("rows_format", ROWS_FORMAT)
                    manifest.setdefault("libraries", library_versions())
                    self._db.executemany(
                        "INSERT OR REPLACE INTO manifest (key, value) VALUES (?, ?)",
                        [(k, json.dumps(v)) for k, v in manifest.items()],
                    )
                    written += sum(len(json.dumps(v)) for v in manifest.values())
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")  # all or nothing, whatever interrupted it
                if not isinstance(exc, sqlite3.Error):
                    raise
                raise ModelStoreError(
                    f"cannot commit the tree state to {self.path}: {exc}; check free space and "
                    "permissions of the state dir, then run the command again"
                ) from exc
            trim_log(self._db, self.path, written)
            self._identity = file_identity(self.path)  # a checkpoint may have written the file
        return written

    def evict_oldest(self, ns: str, keep: int, *, down_to: int | None = None) -> int:
        """Delete the least recently stamped rows of ``ns`` beyond ``keep`` (down to ``down_to``
        rows, default ``keep``, so that the next eviction waits for as many new rows); return
        how many.

        Counting a namespace reads every one of its index entries (47k cached summaries of a
        265k-leaf tree: 1.6 ms warm, 9 ms cold, at every commit), so the count is skipped while
        an upper bound of the rows (the last count plus every row put since by this connection,
        with no other connection's commit in between) is within ``keep``.
        """
        if self.readonly:
            return 0
        with self._lock:
            (version,) = self._db.execute("PRAGMA data_version").fetchone()
            bound, seen = self._bounds.get(ns, (keep + 1, -1))
            if seen == version and bound <= keep:
                return 0
            (n,) = self._db.execute("SELECT count(*) FROM rows WHERE ns = ?", (ns,)).fetchone()
            excess = int(n) - (keep if down_to is None else min(down_to, keep))
            if int(n) <= keep:
                self._bounds[ns] = (int(n), version)
                return 0
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "DELETE FROM rows WHERE ns = ? AND key IN "
                "(SELECT key FROM rows WHERE ns = ? ORDER BY stamp, key LIMIT ?)",
                (ns, ns, excess),
            )
            self._db.execute("COMMIT")
            self._identity = file_identity(self.path)
            # data_version moves only with other connections' commits: this one leaves it be
            self._bounds[ns] = (int(n) - excess, version)
        return excess

    def delete_below(self, ns: str, key: str) -> int:
        """Delete the rows of ``ns`` whose key sorts before ``key`` (one transaction, one index
        range); return how many."""
        if self.readonly:
            return 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            cur = self._db.execute("DELETE FROM rows WHERE ns = ? AND key < ?", (ns, key))
            self._db.execute("COMMIT")
            self._identity = file_identity(self.path)
            self._bounds.pop(ns, None)
        return int(cur.rowcount)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()
            self.closed = True


_SHARED: OrderedDict[tuple[int, str, bool], RowStore] = OrderedDict()
_SHARED_LOCK = threading.Lock()
