"""Containers whose items are rows of the state database, loaded on first use: a mapping with
non-string keys (:class:`KeyedRowMap`) and an append-only list (:class:`RowList`). They hold the
maps and the per-group models of a stored layer (:mod:`ingestor.tree.layer_store`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping, MutableSequence
from typing import Any, Generic, TypeVar, overload

from ingestor.tree.rowmap import RowMap
from models_store import RowStore

__all__ = ["KeyedRowMap", "RowList"]

K = TypeVar("K")
V = TypeVar("V")


class KeyedRowMap(MutableMapping[K, V], Generic[K, V]):
    """A :class:`~ingestor.tree.rowmap.RowMap` with non-string keys (ints, pairs)."""

    def __init__(self, rows: RowMap[V], kind: str) -> None:
        self.rows = rows
        self.kind = kind

    def _enc(self, key: Any) -> str:
        if self.kind == "pair":
            return f"{key[0]}/{key[1]}"
        return str(key)

    def _dec(self, key: str) -> Any:
        if self.kind == "int":
            return int(key)
        if self.kind == "pair":
            g, p = key.split("/")
            return int(g), int(p)
        return key

    def __getitem__(self, key: K) -> V:
        return self.rows[self._enc(key)]

    def edit(self, key: K) -> V:
        """Return a value to change in place, marked for the next commit (``RowMap.edit``)."""
        return self.rows.edit(self._enc(key))

    def prefetch(self, keys: Iterable[K]) -> None:
        """Read the rows of ``keys`` not yet loaded in one query (see ``RowMap.prefetch``)."""
        self.rows.prefetch(self._enc(k) for k in keys)

    def __setitem__(self, key: K, value: V) -> None:
        self.rows[self._enc(key)] = value

    def __delitem__(self, key: K) -> None:
        del self.rows[self._enc(key)]

    def __contains__(self, key: object) -> bool:
        return self._enc(key) in self.rows

    def __iter__(self) -> Iterator[K]:
        return (self._dec(k) for k in self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def items(self) -> list[tuple[K, V]]:  # type: ignore[override]
        return [(self._dec(k), v) for k, v in self.rows.items()]

    def values(self) -> list[V]:  # type: ignore[override]
        return self.rows.values()


class RowList(MutableSequence[V], Generic[V]):
    """A list whose items are rows (one per index), loaded on first use.

    Args:
        on_load: called with each item read from the database (to re-link shared objects).
    """

    def __init__(
        self, rows: RowMap[V], length: int, on_load: Callable[[V], None] | None = None
    ) -> None:
        self.rows = rows
        self.length = length
        self.on_load = on_load
        self._linked: set[int] = set()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle (or copy) with every item loaded and re-linked, without the loader."""
        for j in range(self.length):
            self[j]
        return self.__dict__ | {"on_load": None}

    @overload
    def __getitem__(self, i: int) -> V: ...
    @overload
    def __getitem__(self, i: slice) -> list[V]: ...
    def __getitem__(self, i: int | slice) -> V | list[V]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.length))]
        if not -self.length <= i < self.length:
            raise IndexError(i)
        i %= self.length
        return self._linked_item(i, self.rows[str(i)])

    def edit(self, i: int) -> V:
        """Return item ``i`` to change in place, marked for the next commit (``RowMap.edit``)."""
        if not -self.length <= i < self.length:
            raise IndexError(i)
        i %= self.length
        return self._linked_item(i, self.rows.edit(str(i)))

    def _linked_item(self, i: int, value: V) -> V:
        if self.on_load is not None and i not in self._linked:
            self.on_load(value)
            self._linked.add(i)
        return value

    def __setitem__(self, i: int | slice, value: Any) -> None:
        if isinstance(i, slice):
            raise TypeError("RowList does not support slice assignment")
        if not -self.length <= i < self.length:
            raise IndexError(i)
        i %= self.length
        self.rows[str(i)] = value
        self._linked.add(i)

    def __delitem__(self, i: int | slice) -> None:
        raise TypeError("items of a layer are never deleted, only replaced")

    def __len__(self) -> int:
        return self.length

    def rebind(self, rows: RowMap[V]) -> None:
        """Read the same items from ``rows`` from now on; each is linked again when read."""
        self.rows = rows
        self._linked.clear()

    def shed(self, committed_to: RowStore | None = None, *, used_since: int | None = None) -> int:
        """Drop the items held in memory (see ``RowMap.shed``); return how many."""
        n = self.rows.shed(committed_to, used_since=used_since)
        if n:  # read again, linked again
            self._linked = {i for i in self._linked if self.rows.holds(str(i))}
        return n

    def insert(self, i: int, value: V) -> None:
        if i != self.length:
            raise TypeError("RowList only appends")
        self.rows[str(self.length)] = value
        self._linked.add(self.length)
        self.length += 1
