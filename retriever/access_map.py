"""Each point's access classes, kept in memory by the embedded store that writes them.

A reader who may read half of a tree's access classes paid 2.34x an unfiltered query at 100k
nodes (bench/access.py): a filtered HNSW walk checks the ``access`` condition on every point it
steps to (~1 us each in the engine) and, dropping half of them, walks a sparser graph that needs
a wider search for the same recall. Its hits are the unfiltered ranking's readable points in the
same order, so the store walks unfiltered, asking for ``limit / share`` hits, and keeps the
readable ones (:meth:`~retriever.edge_store.EdgeNodeStore.search_budget`). That needs each hit's
classes at a dictionary lookup's cost, not a payload read's (the engine parses a point's whole
payload to return one field): this map.

The embedded shard has one writer, the process that holds its folder lock, and every write of a
point's classes goes through the store's ``upsert``, ``delete`` and ``set_access``, which keep
the map; a model change's switch, a failed write or a close drops it. A reader's query marks it
wanted; the daemon then fills it a page at a time (:meth:`EdgeNodeStore.fill_access_page
<retriever.edge_store.EdgeNodeStore.fill_access_page>`, each page a store call of its own: 100k
points in ~3 s, never one lock held that long), the writes in between kept as they come; until
it is complete, readers' queries use the engine's filter. Reading a point's payload afterwards
(every hit served is read) checks its classes again, so a map out of date could only hide a
point, never serve one the caller may not read.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol, TypeVar

import qdrant_edge as qe

from retriever.reader_copy import ReaderCopies
from retriever.schema import F, readable_by
from retriever.validation import point_key

log = logging.getLogger(__name__)

__all__ = [
    "ACCESS_PAGE",
    "NO_CLASSES",
    "READABLE_WALK_MARGIN",
    "READABLE_WALK_MAX",
    "READABLE_WALK_MIN_SHARE",
    "AccessMap",
    "point_key",
    "scroll_access",
]

#: A reader's query walks unfiltered and drops what the map says they may not read when they
#: may read at least this share of the points the rest of the filter keeps ...
READABLE_WALK_MIN_SHARE: Final = 0.2
#: ... asking for this many times ``limit / share`` hits, or for the walk's breadth if more (it
#: visits that many anyway), each rescored once (the estimate's error, the class mix of the
#: question's neighbourhood). Where that keeps too few (a question among points the reader may
#: not read: a third of the bench's questions), the reader's own filtered walk follows: at 100k
#: nodes and a reader of half the classes it took 6.0 ms where one unfiltered walk 8x as deep
#: took 8.3-9.6, at recall@32 0.86 against 0.84 (deeper unfiltered walks keep readable hits from
#: ranks too shallow to order: 2x, 0.79) ...
READABLE_WALK_MARGIN: Final = 1.3
#: ... and never more than this many (past it, the reader's own filtered walk is cheaper).
READABLE_WALK_MAX: Final = 1400
#: Points per :meth:`AccessMap.fill_from` (~30 ms of the engine's scroll).
ACCESS_PAGE: Final = 1024
#: Readers whose :meth:`AccessMap.readable_sets` are remembered.
JUDGED_READERS: Final = 256
#: Points per page of :func:`scroll_access`.
PAGE: Final = 4096

#: The class set of a point that lists none (points written before access classes, the meta
#: point) or that the map does not know: no restricted caller may read it.
NO_CLASSES: Final = 0


class _Identified(Protocol):
    @property
    def id(self) -> uuid.UUID | str | int: ...


_Hit = TypeVar("_Hit", bound=_Identified)


class AccessMap:
    """Point id (its UUID's integer) -> the index of its class set in :attr:`sets`."""

    def __init__(self) -> None:
        self.sets: list[frozenset[str]] = [frozenset()]
        self._index: dict[frozenset[str], int] = {frozenset(): NO_CLASSES}
        self.points: dict[int, int] = {}
        #: Points per class set (by index), for the share a reader may read.
        self.counts: list[int] = [0]
        #: :meth:`readable_sets` per reader, extended as sets are added (summaries' unions
        #: make thousands: 0.6 ms a query to judge them all again).
        self._judged: dict[frozenset[str], list[bool]] = {}
        #: Counts of each change of :attr:`points`: a reader's share (:meth:`reader_share`) is
        #: remembered until the next.
        self.version = 0
        self._shares: dict[frozenset[str], tuple[int, float]] = {}
        #: Whether every point of the shard is in :attr:`points` (filled once, then kept).
        self.complete = False
        #: A fill under way: the scroll's next offset (None: from the start).
        self.filling = False
        self.offset: object = None
        #: A reader's query found the map not complete: the daemon fills it.
        self.wanted = False
        #: Readers' points copied for their scans (:mod:`retriever.reader_copy`), kept by the
        #: same writes.
        self.copies = ReaderCopies()

    def _set_of(self, classes: Iterable[str]) -> int:
        key = frozenset(classes)
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.sets)
            self.sets.append(key)
            self.counts.append(0)
        return found

    def _record(self, key: int, found: int) -> None:
        old = self.points.get(key)
        if old is not None:
            self.counts[old] -= 1
        self.points[key] = found
        self.counts[found] += 1
        self.version += 1

    def fill(
        self, points: Iterable[tuple[uuid.UUID | str | int, Sequence[str]]], offset: object = None
    ) -> None:
        """Record a page of the shard's points (a scroll of their ``access`` fields) and where
        the scroll goes on; complete when it ends (``offset`` None)."""
        self.filling = True
        for point_id, classes in points:
            self._record(point_key(point_id), self._set_of(classes))
        self.offset = offset
        if offset is None:
            self.complete, self.filling = True, False

    def fill_from(self, shard: qe.EdgeShard, points: int, where: object) -> bool:
        """Read the classes of up to ``points`` more points of ``shard`` (the store at ``where``)
        into the map; return whether it is complete. One store call a page, so a daemon fills it
        beside its queries and writes."""
        page, offset = scroll_access(shard, self.offset, points)
        self.fill(page, offset)
        if self.complete:
            log.info(
                "embedded store %s: the access map holds its %d points", where, len(self.points)
            )
        return self.complete

    @property
    def kept(self) -> bool:
        """Whether writes are recorded (the map is complete, or a fill is under way: a page read
        later reads the shard as written)."""
        return self.complete or self.filling

    def put(self, entries: Iterable[tuple[str, Sequence[str]]]) -> None:
        """Points written (upserted) with these classes."""
        if self.kept:
            for point_id, classes in entries:
                self._record(point_key(point_id), self._set_of(classes))

    def assign(self, groups: Mapping[tuple[str, ...], Sequence[str]]) -> None:
        """Points whose classes were set (``set_access``): each group's ids get its classes;
        readers' copies are dropped (who reads which point changed)."""
        self.copies.clear()
        if self.kept:
            for classes, ids in groups.items():
                found = self._set_of(classes)
                for point_id in ids:
                    key = point_key(point_id)
                    if key in self.points:  # a point not in the shard is not made by this
                        self._record(key, found)

    def drop(self, ids: Iterable[str]) -> None:
        """Points deleted (their ids parsed once, for the map and the readers' copies)."""
        if not (self.kept or self.copies):
            return
        keys = [point_key(i) for i in ids]
        self.copies.drop(keys)
        if self.kept:
            for key in keys:
                old = self.points.pop(key, None)
                if old is not None:
                    self.counts[old] -= 1
                    self.version += 1

    def clear(self) -> None:
        """Forget every point (the shard was replaced or closed), and the readers' copies:
        filled again when asked."""
        self.copies.clear()
        self.points.clear()
        self.counts = [0] * len(self.sets)
        self.complete = self.filling = False
        self.offset = None
        self.version += 1

    def readable_sets(self, readable: Iterable[str]) -> list[bool]:
        """For each class set's index, whether a caller who may read ``readable`` reads it
        (:func:`~retriever.schema.readable_by`)."""
        ok = frozenset(readable)
        judged = self._judged.get(ok)
        if judged is None:
            if len(self._judged) >= JUDGED_READERS:
                self._judged.clear()
                self._shares.clear()
            judged = self._judged[ok] = []
        if len(judged) < len(self.sets):
            judged.extend(readable_by(s, ok) for s in self.sets[len(judged) :])
        return judged

    def reader_share(self, readable: Iterable[str]) -> tuple[list[bool], float]:
        """:meth:`readable_sets` and :meth:`share` of a caller who may read ``readable``, the
        share remembered until the points change (summing every class set's count took ~80 us
        a query at 100k nodes: their unions make a thousand sets)."""
        ok = frozenset(readable)
        sets = self.readable_sets(ok)
        seen = self._shares.get(ok)
        if seen is None or seen[0] != self.version:
            seen = self._shares[ok] = (self.version, self.share(sets))
        return sets, seen[1]

    def readable_hits(
        self, hits: Sequence[_Hit], readable_sets: list[bool], limit: int
    ) -> list[_Hit]:
        """The first ``limit`` of ``hits`` whose class set ``readable_sets`` marks readable (each
        hit's id read builds a ``uuid.UUID``, ~1 us: no more are read than needed)."""
        points, kept = self.points, []
        for hit in hits:
            if readable_sets[points.get(point_key(hit.id), NO_CLASSES)]:
                kept.append(hit)
                if len(kept) == limit:
                    break
        return kept

    def share(self, readable_sets: list[bool]) -> float:
        """The share of the shard's points whose class set ``readable_sets`` marks readable."""
        total = sum(self.counts)
        return sum(n for n, ok in zip(self.counts, readable_sets, strict=True) if ok) / max(
            1, total
        )


def scroll_access(
    shard: qe.EdgeShard, offset: object = None, limit: int | None = None
) -> tuple[list[tuple[uuid.UUID | str | int, list[str]]], object]:
    """The points of ``shard`` from ``offset`` (None: the start) with the classes their
    ``access`` field lists, and the offset to go on from (None: the end): at most ``limit``
    points (None: every one)."""
    out: list[tuple[uuid.UUID | str | int, list[str]]] = []
    while True:
        page = PAGE if limit is None else min(PAGE, limit - len(out))
        request = qe.ScrollRequest(
            limit=page,
            offset=offset,  # type: ignore[arg-type]
            with_payload=[F.ACCESS],
            with_vector=False,
        )
        records, offset = shard.scroll(request)
        out.extend((r.id, list((r.payload or {}).get(F.ACCESS) or ())) for r in records)
        if offset is None or (limit is not None and len(out) >= limit):
            return out, offset
