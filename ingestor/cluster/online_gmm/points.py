"""Two small pieces of an :class:`~ingestor.cluster.online_gmm.OnlineGMM` that are stored with
it: the growable point buffer with stable ids and the per-layer cluster id counter (pickled by
the package's name, :mod:`ingestor.cluster.online_gmm`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = ["IdCounter", "PointBuffer"]


@dataclass
class IdCounter:
    """Hands out cluster ids; share one between the OnlineGMMs of a layer so ids never collide."""

    next_id: int = 0

    def take(self) -> int:
        """Return a fresh id."""
        self.next_id += 1
        return self.next_id - 1


@dataclass
class PointBuffer:
    """Points with stable ids in a growable (capacity, d) buffer; removal swaps with the last."""

    X: NDArray[np.float64]
    ids: list[int]
    row: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.row = {pid: r for r, pid in enumerate(self.ids)}

    @property
    def n(self) -> int:
        return len(self.ids)

    def view(self) -> NDArray[np.float64]:
        return self.X[: self.n]

    def append(self, pid: int, x: NDArray[np.float64]) -> None:
        if self.n == len(self.X):  # amortised O(1): double the buffer
            grown = np.empty((max(8, 2 * len(self.X)), self.X.shape[1]))
            grown[: self.n] = self.X[: self.n]
            self.X = grown
        self.X[self.n] = x
        self.row[pid] = self.n
        self.ids.append(pid)

    def pop(self, pid: int) -> None:
        r = self.row.pop(pid)
        last = self.n - 1
        if r != last:
            self.X[r] = self.X[last]
            self.ids[r] = self.ids[last]
            self.row[self.ids[r]] = r
        self.ids.pop()
