"""Node vectors held in memory as the rows of one float32 matrix, the rest read from the store.

Qdrant already holds every node's vector, so the state keeps no second copy on disk: a vector
that is not in memory is fetched from the node store (``fetch``, set by the pipeline) and kept.

The vectors held are rows of one ``(capacity, dim)`` float32 matrix, not one array per node: a
build's leaves, set in order, are then one contiguous block, and the layer over them is
clustered on a read-only view of it (:meth:`VectorMap.stack`) instead of a stacked copy. At 26k
leaves the per-node arrays and the copy cost ~3.2 KB a leaf at the peak of the first layer's fit;
the rows alone cost the 1.5 KB of the vector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping

import numpy as np
from numpy.typing import NDArray

from ingestor.tree.rowmap import Clock

__all__ = ["VectorMap"]

#: Rows a matrix starts with, and grows by at least (then by half its size).
_MIN_ROWS = 1024
#: Rows moved at a time into a grown matrix (a gathered copy of all of them was a third
#: matrix beside the old and the new: 1.5 GB more at 1M leaves).
_MOVE_ROWS = 16_384


class VectorMap(MutableMapping[str, NDArray[np.float32]]):
    """Node vectors: those of this process's new nodes in memory, the rest read from the store.

    ``map[id]`` returns a copy of the row (a later change of the map never changes what was
    handed out); :meth:`stack` returns many rows as one matrix. A state without ``fetch`` only
    knows the vectors put into it.

    Args:
        clock: the clock of its tree's state, which stamps the vectors held (see :meth:`shed`).
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._row: dict[str, int] = {}
        self._data: NDArray[np.float32] | None = None
        self._free: list[int] = []  # rows of vectors popped or shed, reused first
        self._end = 0  # rows ever used at the end of the matrix
        self._used: dict[str, int] = {}  # id -> clock.now when last read or set
        self.fetch: Callable[[list[str]], NDArray[np.float32]] | None = None

    # -- the matrix ------------------------------------------------------------------------------

    def reserve(self, n: int, dim: int) -> None:
        """Make room for ``n`` more vectors of ``dim`` floats without growing the matrix again
        (rows not written take no memory: the pages of a large matrix are mapped on first use)."""
        want = len(self._row) + n
        if self._data is None or len(self._data) < want:
            self._resize(want, dim)

    def _resize(self, rows: int, dim: int) -> None:
        """Move the held rows, compacted, into a new matrix of ``rows`` rows."""
        data = np.empty((max(rows, len(self._row)), dim), dtype=np.float32)
        if self._data is not None and self._row:
            old = np.fromiter(self._row.values(), dtype=np.intp, count=len(self._row))
            for start in range(0, len(old), _MOVE_ROWS):  # no temporary copy of every row
                part = old[start : start + _MOVE_ROWS]
                data[start : start + len(part)] = self._data[part]
        self._row = dict(zip(self._row, range(len(self._row)), strict=True))
        self._data, self._free, self._end = data, [], len(self._row)

    def _slot(self, dim: int) -> int:
        if self._free:
            return self._free.pop()
        if self._data is None or self._end == len(self._data):
            size = 0 if self._data is None else len(self._data)
            self._resize(max(_MIN_ROWS, size + size // 2), dim)
        self._end += 1
        return self._end - 1

    def stack(self, ids: list[str]) -> NDArray[np.float32]:
        """Return the ``(len(ids), dim)`` matrix of the vectors of ``ids`` (all held).

        Rows held in the order asked (a build's leaves) come back as a read-only view of the
        matrix, no copy; others as a copy.

        Raises:
            KeyError: a vector is not held (:meth:`prefetch` them first).
        """
        rows = np.fromiter((self._row[i] for i in ids), dtype=np.intp, count=len(ids))
        self._used.update(dict.fromkeys(ids, self.clock.now))
        assert self._data is not None  # ids is not empty: they are held
        first = int(rows[0])
        if int(rows[-1]) - first == len(rows) - 1 and (np.diff(rows) == 1).all():
            view = self._data[first : first + len(rows)]
            view.flags.writeable = False
            return view
        return self._data[rows]

    # -- the store's copy ------------------------------------------------------------------------

    def prefetch(self, ids: Iterable[str]) -> None:
        """Load the vectors of ``ids`` that are not in memory, in one store call."""
        ids = list(ids)
        missing = [i for i in dict.fromkeys(ids) if i not in self._row]
        if missing and self.fetch is not None:
            vectors = self.fetch(missing)
            if len(vectors):
                self.reserve(len(missing), vectors.shape[1])
            for i, vec in zip(missing, vectors, strict=True):
                self[i] = vec
        self._used.update(dict.fromkeys((i for i in ids if i in self._row), self.clock.now))

    def shed(self, *, used_since: int | None = None) -> int:
        """Forget the vectors held in memory (but those read or set at or after ``used_since``)
        when the store can give them back; return how many (none without ``fetch``: then this
        map holds the only copy). The rows kept move into a matrix of their size."""
        if self.fetch is None:
            return 0
        dropped = [k for k in self._row if used_since is None or self._used.get(k, -1) < used_since]
        for key in dropped:
            del self._row[key]
            self._used.pop(key, None)
        if not self._row:
            self._data, self._free, self._end = None, [], 0
        elif dropped:
            assert self._data is not None
            self._resize(len(self._row), self._data.shape[1])
        return len(dropped)

    # -- the mapping -----------------------------------------------------------------------------

    def __getitem__(self, key: str) -> NDArray[np.float32]:
        if key not in self._row:
            self.prefetch([key])
        row = self._row[key]
        self._used[key] = self.clock.now
        assert self._data is not None
        vec: NDArray[np.float32] = self._data[row].copy()
        return vec

    def __contains__(self, key: object) -> bool:
        return key in self._row

    def pop(self, key: str, default: object = None) -> object:  # type: ignore[override]
        """Forget a vector held in memory (the store is not asked); return it or ``default``."""
        self._used.pop(key, None)
        row = self._row.pop(key, None)
        if row is None:
            return default
        assert self._data is not None
        self._free.append(row)
        return self._data[row].copy()

    def __setitem__(self, key: str, value: NDArray[np.float32]) -> None:
        vec = np.asarray(value, dtype=np.float32).ravel()
        row = self._row.get(key)
        if row is None:
            row = self._row[key] = self._slot(len(vec))
        assert self._data is not None
        self._data[row] = vec
        self._used[key] = self.clock.now

    def __delitem__(self, key: str) -> None:
        if key not in self._row:
            raise KeyError(key)
        self.pop(key)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._row))

    def __len__(self) -> int:
        return len(self._row)
