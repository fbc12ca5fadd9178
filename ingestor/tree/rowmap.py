"""Mappings whose rows live in the state database, loaded on first use and written back by commit.

A tree's state is read and changed a few rows at a time: an update touches the leaves of one
document, the members of a few clusters and their ancestors. :class:`RowMap` loads a row the first
time it is asked for, keeps it, and remembers which keys were set, deleted or taken for change
(:meth:`RowMap.edit`), so that a commit writes exactly those rows. Reading (``[]``, ``get``,
iteration) never marks a row: a value changed in place must be taken with ``edit`` (or set back),
and with :data:`CHECK_EDITS_VARIABLE` set (the test suite sets it) each commit checks that no
row held was changed without. Iterating a RowMap loads the whole namespace once (that is an
O(tree) operation, for builds, reconciliation and checks, never for the update path).

Rows held are stamped with the time of a :class:`Clock`, one per tree's state, which
:func:`~ingestor.tree.persist.shed_rows` advances after each update: two trees open in one
process age their rows each by its own updates.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from models_store import Changes, IncompatibleModelError, RowStore, unpickle

V = TypeVar("V")

#: What a subclass's ``_fetch`` returns for a key without a row.
MISSING = object()


#: Set to anything but ``""`` or ``"0"``, every commit checks that no row held was changed in
#: place without :meth:`RowMap.edit` (which would be lost: such a row is not written). Each row
#: is then encoded when read and again at each commit: for tests (the suite sets it), not use.
CHECK_EDITS_VARIABLE = "ADRAP_CHECK_EDITS"


def checking_edits() -> bool:
    """Whether maps made now check their rows for changes made without ``edit``."""
    return os.environ.get(CHECK_EDITS_VARIABLE, "") not in ("", "0")


class UneditedChangeError(RuntimeError):
    """A row was changed in place without :meth:`RowMap.edit`: a commit would not write it."""


@dataclass(eq=False)
class Clock:
    """Time for the rows one tree's state holds in memory: rows read or set are stamped with
    ``now``, and :func:`~ingestor.tree.persist.shed_rows` advances it after each update
    (:meth:`tick`), so "the rows the last n updates used" are those stamped ``now - n + 1`` or
    later. The state hands its clock to every map it makes (``TreeState.clock``)."""

    now: int = 0

    def tick(self) -> int:
        """End an update: advance the clock; return the time that update ran at."""
        self.now += 1
        return self.now - 1


def _drop(cache: dict[str, Any], used: dict[str, int], since: int | None) -> list[str]:
    """Delete from ``cache`` (and ``used``) the keys last used before ``since`` (None: all)."""
    dropped = [k for k in cache if since is None or used.get(k, -1) < since]
    for key in dropped:
        del cache[key]
        used.pop(key, None)
    return dropped


def fingerprint(value: object) -> bytes:
    """A digest of a row value's encoding (the check of edits compares two)."""
    return hashlib.blake2b(dumps(value), digest_size=16).digest()


def dumps(value: object) -> bytes:
    """Encode a row value (the C pickler: our own state, on our own volume)."""
    return pickle.dumps(value, protocol=5)


def loads(data: bytes) -> object:
    """Decode a row value written by :func:`dumps`."""
    return pickle.loads(data)


def loads_model(data: bytes, what: str) -> object:
    """Decode a row holding a fitted model (UMAP, GMM, online GMM) named ``what``.

    Raises:
        IncompatibleModelError: the installed libraries cannot read it (pickled by other
            versions of them, or damaged); the next update refits it from the stored vectors.
    """
    try:
        return unpickle(data)
    except Exception as exc:  # any unpickling failure: AttributeError, ImportError, ...
        raise IncompatibleModelError(
            f"{what} cannot be read by the installed libraries ({type(exc).__name__}: {exc}); "
            "the next update (`adrap add`, the daemon) refits it from the stored vectors"
        ) from exc


class RowMap(MutableMapping[str, V], Generic[V]):
    """A mapping backed by one namespace of a :class:`~models_store.rows.RowStore`.

    Args:
        ns: the namespace of its rows.
        clock: the clock of its tree's state, which stamps the rows held (see :meth:`shed`).
        touch_on_read: refresh a row's stamp whenever it is read (LRU eviction of a cache).

    A value taken by ``[]``/``get`` is for reading; one to change in place is taken by
    :meth:`edit`, which marks its row for the next commit (``map[key] = value`` writes it too).
    A RowMap without rows (``bind`` not called) is a plain in-memory mapping: a tree being built.
    """

    #: Whether the check of edits (:data:`CHECK_EDITS_VARIABLE`) covers this map's values (not
    #: for fitted models: replaced whole when refitted, their objects keep caches as they work).
    checked: ClassVar[bool] = True

    def __init__(self, ns: str, clock: Clock, *, touch_on_read: bool = False) -> None:
        self.ns = ns
        self.clock = clock
        self.touch_on_read = touch_on_read
        self._rows: RowStore | None = None
        self._cache: dict[str, V] = {}
        self._dirty: set[str] = set()
        self._deleted: set[str] = set()
        self._read: set[str] = set()
        self._complete = True  # the cache holds every row (nothing stored, or all loaded)
        self._cleared = False
        self._absent: set[str] = set()  # keys a prefetch found missing (set() puts them back)
        self._used: dict[str, int] = {}  # key -> clock.now when last read or set (see shed)
        #: With the check of edits: key -> fingerprint of its value as read or last written.
        self._seen: dict[str, bytes] | None = {} if self.checked and checking_edits() else None

    def __getstate__(self) -> dict[str, object]:
        """Pickle (or copy) as a plain in-memory mapping: every row loaded, no database."""
        self._load_all()
        return self.__dict__ | {"_rows": None, "_complete": True}

    # -- binding to the database -----------------------------------------------------------------

    def bind(self, rows: RowStore) -> None:
        """Back this mapping by ``rows``: nothing is loaded until asked for."""
        self._rows = rows
        self._cache.clear()
        self._dirty.clear()
        self._deleted.clear()
        self._read.clear()
        self._absent.clear()
        self._used.clear()
        if self._seen is not None:
            self._seen.clear()
        self._complete = False
        self._cleared = False

    def replace_all(self) -> None:
        """Mark every row for rewriting: the next commit empties the namespace and writes the cache."""
        self._load_all()
        self._cleared = True
        self._dirty = set(self._cache)
        self._deleted.clear()

    @property
    def store(self) -> RowStore | None:
        """The database this mapping is bound to (None: in memory only)."""
        return self._rows

    @property
    def cleared(self) -> bool:
        """Whether every stored row goes at the next commit (:meth:`replace_all`)."""
        return self._cleared

    def namespaces(self) -> list[str]:
        """The namespaces this mapping's rows live in (cleared together)."""
        return [self.ns]

    def write_row(self, key: str, value: V, out: Changes) -> None:
        """Add the writes of one changed entry to ``out`` (a subclass may write it by parts)."""
        out.set(self.ns, key, dumps(value))

    def changes(self, out: Changes) -> None:
        """Add this mapping's pending writes to ``out``.

        Raises:
            UneditedChangeError: with the check of edits on, a row held was changed in place
                without :meth:`edit` (nothing is added; the commit is refused).
        """
        if self._seen is not None:
            self._check_edits(self._seen)
        if self._cleared:
            out.clear.update(self.namespaces())
        for key in self._dirty:
            if key in self._cache:
                self.write_row(key, self._cache[key], out)
                if self._seen is not None:
                    self._seen[key] = self._fingerprint(self._cache[key])
        if not self._cleared:
            for key in self._deleted:
                out.remove(self.ns, key)
        for key in self._read - self._dirty - self._deleted:
            out.touch.add((self.ns, key))

    def _check_edits(self, seen: dict[str, bytes]) -> None:
        """Refuse a row held that differs from what was read or last written, unmarked."""
        for key, was in seen.items():
            if key in self._dirty or key not in self._cache:
                continue
            if self._fingerprint(self._cache[key]) != was:
                raise UneditedChangeError(
                    f"row {key!r} of namespace {self.ns!r} changed in place without edit(): "
                    "the commit would not write it"
                )

    def _fingerprint(self, value: V) -> bytes:
        """What the check of edits compares of a value (a subclass may leave parts out)."""
        return fingerprint(value)

    def _saw(self, key: str, value: V) -> None:
        """Remember a value as read from the database (the check of edits only)."""
        if self._seen is not None:
            self._seen[key] = self._fingerprint(value)

    def committed(self) -> None:
        """Forget the pending writes once they are in the database."""
        self._dirty.clear()
        self._deleted.clear()
        self._read.clear()
        self._cleared = False

    def held(self) -> int:
        """Return how many rows this mapping holds in memory."""
        return len(self._cache)

    def shed(self, committed_to: RowStore | None = None, *, used_since: int | None = None) -> int:
        """Drop the rows held in memory, which the database holds as they are; return how many.

        Args:
            committed_to: the database this mapping's rows were committed to, for a mapping
                filled in memory (a layer built in this process): read from there from now on.
                Without it, a mapping without a database holds the only copy: nothing is dropped.
            used_since: keep the rows read or set at or after this time of the map's clock.

        Nothing is dropped from a mapping with pending writes. A value read before and changed
        after is then no longer held: call it between updates, after a commit.
        """
        rows = self._rows or committed_to
        if rows is None or self._dirty or self._deleted or self._cleared:
            return 0
        dropped = _drop(self._cache, self._used, used_since)
        if self._seen is not None:
            for key in dropped:
                self._seen.pop(key, None)
        self._forget(dropped)
        self._rows = rows
        self._complete = False
        self._absent.clear()
        return len(dropped)

    def holds(self, key: str) -> bool:
        """Whether the row of ``key`` is held in memory."""
        return key in self._cache

    def _forget(self, keys: list[str]) -> None:
        """Drop what a subclass keeps beside the rows of ``keys`` (just dropped by shed)."""

    def pending_items(self) -> dict[str, V]:
        """Return the values set since the last commit (e.g. summaries paid for by this update)."""
        return {k: self._cache[k] for k in self._dirty if k in self._cache}

    # -- the mapping -----------------------------------------------------------------------------

    def prefetch(self, keys: Iterable[str]) -> None:
        """Read the given keys' rows in one query (later reads hit the cache); marks nothing."""
        if self._complete or self._rows is None:
            return
        skip = (self._cache, self._deleted, self._absent)  # known: read, deleted, or missing
        todo = [k for k in dict.fromkeys(keys) if not any(k in known for known in skip)]
        if len(todo) < 2:
            return
        found = self._rows.get_many(self.ns, todo)
        for k, data in found.items():
            self._cache[k] = value = self._decode(k, data)
            self._saw(k, value)
        self._used.update(dict.fromkeys(found, self.clock.now))
        self._absent.update(k for k in todo if k not in found)

    def keys_with_prefix(self, prefix: str) -> list[str]:
        """Return the keys starting with ``prefix``, sorted: one range scan of the database plus
        what this process set or deleted, never a load of the namespace."""
        mine = {k for k in self._cache if k.startswith(prefix)}
        if self._complete or self._rows is None:
            return sorted(mine)
        stored = set(self._rows.keys_prefix(self.ns, prefix)) - self._deleted
        return sorted(stored | mine)

    def _decode(self, key: str, data: bytes) -> V:
        """Turn a stored row into its value (a subclass may read more rows for it)."""
        return loads(data)  # type: ignore[return-value]

    def _fetch(self, key: str) -> object:
        if key in self._cache:
            self._used[key] = self.clock.now
            return self._cache[key]
        if self._complete or key in self._deleted or key in self._absent or self._rows is None:
            return MISSING
        data = self._rows.get(self.ns, key)
        if data is None:
            return MISSING
        value = self._decode(key, data)
        self._cache[key] = value
        self._saw(key, value)
        self._used[key] = self.clock.now
        return value

    def __getitem__(self, key: str) -> V:
        """Return a value *to read*: a change made to it in place is not written (see
        :meth:`edit`). In a ``touch_on_read`` map its row's stamp is refreshed."""
        value = self._fetch(key)
        if value is MISSING:
            raise KeyError(key)
        if self.touch_on_read:
            self._read.add(key)
        return value  # type: ignore[return-value]

    def peek(self, key: str) -> V | None:
        """Return a value (None if absent) to read, without refreshing its row's stamp in a
        ``touch_on_read`` map (``get`` refreshes it)."""
        value = self._fetch(key)
        return None if value is MISSING else value  # type: ignore[return-value]

    def edit(self, key: str) -> V:
        """Return a value *to change in place*: its row is written back at the next commit.

        Raises:
            KeyError: no row has ``key``.
        """
        value = self._fetch(key)
        if value is MISSING:
            raise KeyError(key)
        self._dirty.add(key)
        return value  # type: ignore[return-value]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._fetch(key) is not MISSING

    def __setitem__(self, key: str, value: V) -> None:
        self._cache[key] = value
        self._used[key] = self.clock.now
        self._dirty.add(key)
        self._deleted.discard(key)
        self._absent.discard(key)

    def __delitem__(self, key: str) -> None:
        if self._fetch(key) is MISSING:
            raise KeyError(key)
        del self._cache[key]
        self._used.pop(key, None)
        if self._seen is not None:
            self._seen.pop(key, None)
        self._dirty.discard(key)
        self._deleted.add(key)

    def scan(self) -> Iterator[tuple[str, V]]:
        """Yield every ``(key, value)``, in key order for the stored ones, decoding one row at a
        time and keeping none (this process's unsaved values first): to read a namespace too
        big to hold, once."""
        yield from ((k, v) for k, v in list(self._cache.items()) if k in self._dirty)
        if self._rows is None:
            return
        for key, data in self._rows.items(self.ns):
            if key not in self._dirty and key not in self._deleted:
                yield key, self._cache[key] if key in self._cache else self._decode(key, data)

    def _load_all(self) -> None:
        if self._complete or self._rows is None:
            return
        for key, data in self._rows.items(self.ns):
            if key not in self._cache and key not in self._deleted:
                self._cache[key] = value = self._decode(key, data)
                self._saw(key, value)
        self._complete = True

    def __iter__(self) -> Iterator[str]:
        self._load_all()
        return iter(list(self._cache))

    def __len__(self) -> int:
        if not self._complete and self._rows is not None and not (self._dirty or self._deleted):
            return self._rows.count(self.ns)  # nothing pending: the database has the answer
        self._load_all()
        return len(self._cache)

    def items(self) -> list[tuple[str, V]]:  # type: ignore[override]
        """Return every ``(key, value)``, loading the namespace once, to read (see :meth:`edit`)."""
        self._load_all()
        return list(self._cache.items())

    def values(self) -> list[V]:  # type: ignore[override]
        """Return every value, loading the namespace once, to read (see :meth:`edit`)."""
        self._load_all()
        return list(self._cache.values())
