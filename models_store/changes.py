"""The writes of one state commit, gathered before :meth:`models_store.rows.RowStore.commit`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Changes"]


class Changes:
    """The writes of one commit: rows to put or delete, stamps to refresh, manifest entries."""

    def __init__(self) -> None:
        self.put: dict[tuple[str, str], bytes] = {}
        self.delete: set[tuple[str, str]] = set()
        self.touch: set[tuple[str, str]] = set()
        self.manifest: dict[str, Any] = {}
        #: Namespaces to empty before the rows above are written (a full rebuild of a layer).
        self.clear: set[str] = set()
        #: Set by :meth:`RowStore.commit` while ``fill`` runs in its open transaction: writes the
        #: clears, deletes and puts gathered so far and empties them (a large commit is held a
        #: part at a time, see :attr:`spill_rows`).
        self.spill: Callable[[Changes], None] | None = None
        #: Puts that make :meth:`set` call :attr:`spill` (None: gather everything first).
        self.spill_rows: int | None = None
        #: Bytes of puts that make :meth:`set` call :attr:`spill` as well (None: rows only): a
        #: layer's fitted models are a few rows of megabytes each.
        self.spill_bytes: int | None = None
        #: Bytes of the puts gathered since the last spill (a put replaced counts twice).
        self.put_bytes = 0

    def set(self, ns: str, key: str, value: bytes) -> None:
        self.put[(ns, key)] = value
        self.delete.discard((ns, key))
        self.put_bytes += len(value)
        if self.spill is not None and (
            (self.spill_rows and len(self.put) >= self.spill_rows)
            or (self.spill_bytes and self.put_bytes >= self.spill_bytes)
        ):
            self.spill(self)

    def remove(self, ns: str, key: str) -> None:
        self.put.pop((ns, key), None)
        self.delete.add((ns, key))

    def __len__(self) -> int:
        return len(self.put) + len(self.delete) + len(self.touch) + len(self.clear)
