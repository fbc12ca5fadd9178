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
the map; a model change's switch or a close drops it. It is filled once, on the first reader's
query, by one scroll of every point's ``access`` field. Reading a point's payload afterwards
(every hit served is read) checks its classes again, so a map out of date could only hide a
point, never serve one the caller may not read.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import qdrant_edge as qe

from retriever.schema import F

__all__ = ["NO_CLASSES", "AccessMap", "point_key", "scroll_access"]

#: Points per page of :func:`scroll_access`.
PAGE: Final = 4096

#: The class set of a point that lists none (points written before access classes, the meta
#: point) or that the map does not know: no restricted caller may read it.
NO_CLASSES: Final = 0


class AccessMap:
    """Point id (its UUID's integer) -> the index of its class set in :attr:`sets`."""

    def __init__(self) -> None:
        self.sets: list[frozenset[str]] = [frozenset()]
        self._index: dict[frozenset[str], int] = {frozenset(): NO_CLASSES}
        self.points: dict[int, int] = {}
        #: Whether every point of the shard is in :attr:`points` (filled once, then kept).
        self.complete = False

    def _set_of(self, classes: Iterable[str]) -> int:
        key = frozenset(classes)
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.sets)
            self.sets.append(key)
        return found

    def fill(self, points: Iterable[tuple[uuid.UUID | str | int, Sequence[str]]]) -> None:
        """Record every point of the shard (a scroll of their ``access`` fields); complete."""
        for point_id, classes in points:
            self.points[point_key(point_id)] = self._set_of(classes)
        self.complete = True

    def put(self, entries: Iterable[tuple[str, Sequence[str]]]) -> None:
        """Points written (upserted) with these classes."""
        if self.complete:
            for point_id, classes in entries:
                self.points[point_key(point_id)] = self._set_of(classes)

    def assign(self, groups: Mapping[tuple[str, ...], Sequence[str]]) -> None:
        """Points whose classes were set (``set_access``): each group's ids get its classes."""
        if self.complete:
            for classes, ids in groups.items():
                found = self._set_of(classes)
                for point_id in ids:
                    key = point_key(point_id)
                    if key in self.points:  # a point not in the shard is not made by this
                        self.points[key] = found

    def drop(self, ids: Iterable[str]) -> None:
        """Points deleted."""
        if self.complete:
            for point_id in ids:
                self.points.pop(point_key(point_id), None)

    def clear(self) -> None:
        """Forget every point (the shard was replaced or closed): filled again when asked."""
        self.points.clear()
        self.complete = False

    def readable_sets(self, readable: Iterable[str]) -> list[bool]:
        """For each class set's index, whether a caller who may read ``readable`` reads it: it
        lists a class, and every class it lists is readable."""
        ok = frozenset(readable)
        return [bool(s) and s <= ok for s in self.sets]


def point_key(point_id: uuid.UUID | str | int) -> int:
    """The map's key of a point id: its UUID's integer (a hit's id is a ``uuid.UUID``)."""
    if isinstance(point_id, uuid.UUID):
        return point_id.int
    if isinstance(point_id, int):
        return point_id
    return uuid.UUID(point_id).int


def scroll_access(shard: qe.EdgeShard) -> list[tuple[uuid.UUID | str | int, list[str]]]:
    """Every point of ``shard`` with the classes its ``access`` field lists (one scroll)."""
    out: list[tuple[uuid.UUID | str | int, list[str]]] = []
    offset: qe.PointId | None = None
    while True:
        request = qe.ScrollRequest(
            limit=PAGE, offset=offset, with_payload=[F.ACCESS], with_vector=False
        )
        records, offset = shard.scroll(request)
        out.extend((r.id, list((r.payload or {}).get(F.ACCESS) or ())) for r in records)
        if offset is None:
            return out
