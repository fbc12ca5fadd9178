"""The points a restricted reader may read, copied into memory and scanned there exactly.

A reader who may read a tenth of a tree's access classes (6.3k of 100k nodes, bench/access.py)
is planned a scan (:mod:`retriever.plan`): the engine reads the int8 copy of each point its
filter keeps, checks the filter on each (~0.4 us a point) and rescores the best with the floats:
2.2-2.5x an unfiltered query. The same points' float vectors in one matrix are scored by one
matrix-vector product (~0.15 ms for 6.3k 384-d points in cache, ~0.8 ms from memory), exactly.

A reader's query whose own plan scans asks for a copy of its filter's points (:meth:`ReaderCopies.
hits`); the engine serves it, and every query until the copy is complete. The daemon fills the
copy a page (one store call, ~50 ms: the engine hands vectors over as Python floats) at a time
beside queries and writes, as it fills the access map (:mod:`retriever.access_map`). The store's
writes keep the copies: the points an upsert wrote that a copy's filter keeps (asked of the
engine by their ids) replace their rows, the others leave; deleted points leave; a change of
access classes, a failed write or a close drops every copy (made again when asked). A copy holds
at most :data:`COPY_MAX_POINTS` points (past it the engine scans, as before), all of them
together at most :data:`COPY_BYTES`, the least recently asked dropped first. Every hit served is
read from the engine, and its classes checked again, so a copy out of date could only hide a
point or rank one by its old vector, never serve one the caller may not read.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import qdrant_edge as qe
from numpy.typing import NDArray

from retriever.schema import VECTOR_NAME, SearchFilter
from retriever.validation import point_key

log = logging.getLogger(__name__)

__all__ = ["COPY_BYTES", "COPY_MAX_POINTS", "COPY_PAGE", "CopyHit", "ReaderCopies"]

#: A copy holds at most this many points (the planner's scan bound, retriever.plan): past it the
#: engine's own filtered search serves the reader.
COPY_MAX_POINTS: Final = 12_000
#: All copies together hold at most this many bytes of vectors (~85k points at 384-d).
COPY_BYTES: Final = 128 * 2**20
#: Points per page of a copy's fill (one store call).
COPY_PAGE: Final = 1024
#: A write of more points drops the copies instead of asking which points each keeps (a build).
COPY_CHECK_MAX: Final = 4096
#: Filters with a copy (made, wanted or too big), the least recently asked dropped first.
COPY_FILTERS: Final = 32

#: The engine's filter of a SearchFilter (None: it matches nothing).
EdgeFilterOf = Callable[[SearchFilter], qe.Filter | None]


@dataclass(slots=True)
class CopyHit:
    """A point scored in a copy, as the engine's ``ScoredPoint`` is read: its id and score (and
    its payload, where asked)."""

    id: uuid.UUID
    score: float
    payload: dict[str, Any] | None = None


class _Copy:
    """One filter's points: ids, their row in :attr:`matrix`, and how far the fill has come."""

    def __init__(self) -> None:
        self.ids: list[uuid.UUID] = []
        self.rows: dict[int, int] = {}
        self.matrix: NDArray[np.float32] = np.empty((0, 0), dtype=np.float32)
        self.offset: qe.PointId | None = None
        self.complete = False
        #: The filter keeps more than COPY_MAX_POINTS: not copied (until the copies are dropped).
        self.too_big = False

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes)

    def put(self, point: uuid.UUID, vector: Sequence[float] | NDArray[np.float32]) -> None:
        row = self.rows.get(point.int)
        if row is None:
            row = len(self.ids)
            if row == len(self.matrix):
                grown = np.empty((max(256, 2 * row), len(vector)), dtype=np.float32)
                if row:
                    grown[:row] = self.matrix[:row]
                self.matrix = grown
            self.ids.append(point)
            self.rows[point.int] = row
        self.matrix[row] = vector

    def drop(self, key: int) -> None:
        row = self.rows.pop(key, None)
        if row is None:
            return
        last = len(self.ids) - 1
        if row != last:  # the last row moves into the hole
            moved = self.ids[row] = self.ids[last]
            self.matrix[row] = self.matrix[last]
            self.rows[moved.int] = row
        self.ids.pop()

    def past_bound(self) -> bool:
        """Whether the copy holds more than COPY_MAX_POINTS; it is then emptied, too big."""
        if len(self.ids) <= COPY_MAX_POINTS:
            return False
        self.too_big, self.ids, self.rows = True, [], {}
        self.matrix = np.empty((0, 0), dtype=np.float32)
        return True

    def top(self, query: NDArray[np.float32], n: int) -> list[CopyHit]:
        """The ``n`` best points by cosine (vectors and query L2-normalised), best first."""
        size = len(self.ids)
        n = min(n, size)
        if n <= 0:
            return []
        scores = self.matrix[:size] @ query
        best = np.argpartition(-scores, n - 1)[:n] if n < size else np.arange(size)
        best = best[np.argsort(-scores[best], kind="stable")]
        return [CopyHit(self.ids[i], float(scores[i])) for i in best.tolist()]


class ReaderCopies:
    """The copies of readers' filters, by filter, least recently asked first."""

    def __init__(self) -> None:
        self._copies: OrderedDict[SearchFilter, _Copy] = OrderedDict()

    def __len__(self) -> int:
        """Filters with a copy (made, wanted or too big)."""
        return len(self._copies)

    @property
    def held(self) -> tuple[int, int]:
        """Points and bytes of vectors that the copies hold."""
        copies = tuple(self._copies.values())
        return sum(len(c.ids) for c in copies), sum(c.nbytes for c in copies)

    @property
    def wanted(self) -> bool:
        """Whether a copy waits to be filled (:meth:`fill_page`); asked without the store's lock
        (the copies listed at once, under the GIL)."""
        return any(not (c.complete or c.too_big) for c in tuple(self._copies.values()))

    def hits(self, flt: SearchFilter, query: NDArray[np.float32], n: int) -> list[CopyHit] | None:
        """The ``n`` best points ``flt`` keeps, from its copy; None where there is none complete
        (one is then wanted, and the engine serves the query)."""
        copy = self._copies.get(flt)
        if copy is None:
            self._copies[flt] = _Copy()
            if len(self._copies) > COPY_FILTERS:
                self._copies.popitem(last=False)
            return None
        self._copies.move_to_end(flt)
        if not copy.complete or copy.too_big:
            return None
        norm = float(np.linalg.norm(query))  # the engine's cosine normalises the query
        return copy.top((query / norm if norm > 0 else query).astype(np.float32), n)

    def fill_page(self, shard: qe.EdgeShard, edge_filter_of: EdgeFilterOf) -> bool:
        """Read one page more of the first copy wanted; return whether none is wanted."""
        for flt, copy in self._copies.items():
            if copy.complete or copy.too_big:
                continue
            engine_filter = edge_filter_of(flt)
            records, offset = (
                shard.scroll(
                    qe.ScrollRequest(
                        limit=COPY_PAGE,
                        offset=copy.offset,
                        filter=engine_filter,
                        with_payload=False,
                        with_vector=[VECTOR_NAME],
                    )
                )
                if engine_filter is not None
                else ([], None)
            )
            for record in records:
                named = record.vector if isinstance(record.vector, dict) else {}
                vector = np.asarray(named.get(VECTOR_NAME, ()), dtype=np.float32)
                if vector.ndim == 1 and vector.size:
                    copy.put(_uuid(record.id), vector)
            copy.offset = offset
            if not copy.past_bound() and offset is None:
                copy.complete, copy.matrix = True, copy.matrix[: len(copy.ids)].copy()
                log.info("a reader's %d points copied for their scans", len(copy.ids))
                self._evict(keep=flt)
            return False
        return True

    def put(
        self,
        node_ids: Sequence[str],
        vectors: NDArray[np.float32],
        shard: qe.EdgeShard,
        edge_filter_of: EdgeFilterOf,
    ) -> None:
        """Points upserted (``vectors`` their rows): each copy keeps those its filter keeps."""
        if not self._copies:
            return
        if len(node_ids) > COPY_CHECK_MAX:
            self.clear()
            return
        points = [uuid.UUID(i) for i in node_ids]
        rows = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)  # as the engine stores them
        for flt, copy in self._copies.items():
            if copy.too_big:
                continue
            engine_filter = edge_filter_of(flt)
            kept: set[int] = set()
            if engine_filter is not None:
                both = qe.Filter(must=[engine_filter, qe.HasIdCondition(set(points))])
                request = qe.ScrollRequest(
                    limit=len(points), filter=both, with_payload=False, with_vector=False
                )
                kept = {point_key(r.id) for r in shard.scroll(request)[0]}
            for point, vector in zip(points, rows, strict=True):
                if point.int in kept:
                    copy.put(point, vector)
                else:
                    copy.drop(point.int)
            copy.past_bound()
        self._evict(keep=next(reversed(self._copies)))

    def drop(self, keys: Sequence[int]) -> None:
        """Points deleted, by :func:`~retriever.validation.point_key`."""
        for copy in self._copies.values():
            for key in keys:
                copy.drop(key)

    def clear(self) -> None:
        """Drop every copy (classes changed, a write failed, the store closed)."""
        self._copies.clear()

    def _evict(self, keep: SearchFilter) -> None:
        """Drop the least recently asked copies (not ``keep``) while all pass COPY_BYTES."""
        while self.held[1] > COPY_BYTES:
            oldest = next((f for f in self._copies if f != keep), None)
            if oldest is None:
                return
            del self._copies[oldest]


def _uuid(point_id: qe.PointId) -> uuid.UUID:
    return point_id if isinstance(point_id, uuid.UUID) else uuid.UUID(str(point_id))
