"""The daemon's locked store is a NodeStore method by method: each call into the wrapped store is
made under the lock (``iter_ids`` drained under it), and nothing else passes through unchecked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from ingestor.pipeline.context import bulk_writes
from ingestor.service.concurrency import LockedStore, lock_store
from retriever import F, NodeStore, SearchFilter

FLT = SearchFilter(tree="t")
VEC = np.zeros(4, dtype=np.float32)
CALLS: dict[str, tuple[Any, ...]] = {
    "ensure_collection": (4, "model"),
    "upsert": ([], np.zeros((0, 4), dtype=np.float32)),
    "delete": ([],),
    "set_access": ({},),
    "search": (VEC, FLT, 3),
    "search_budget": (VEC, FLT, 3, 100),
    "index_sparse": (),
    "retrieve": ([],),
    "retrieve_vectors": ([],),
    "iter_ids": ("t",),
    "scroll": (FLT, 10),
    "scroll_fields": (FLT, (F.NODE_ID,), 10),
    "count": (FLT,),
    "optimize": (),
    "flush": (),
    "close": (),
}


class Recorder:
    """Records, for each call, whether the calling thread held ``lock`` at that moment."""

    def __init__(self) -> None:
        self.lock: Any = None
        self.held: dict[str, bool] = {}

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.held[name] = self.lock._is_owned()
            return self._ids() if name == "iter_ids" else None

        return call

    def _ids(self) -> Iterator[str]:
        for i in ("a", "b"):
            self.held[f"iter_ids:{i}"] = self.lock._is_owned()
            yield i


def test_every_method_of_the_protocol_is_the_locked_stores_own() -> None:
    methods = {n for n, v in vars(NodeStore).items() if callable(v) and not n.startswith("_")}
    assert methods == set(CALLS), "a NodeStore method this test does not call"
    assert methods <= set(vars(LockedStore)), "a NodeStore method the locked store lacks"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_call_is_made_under_the_lock(name: str) -> None:
    inner = Recorder()
    store = LockedStore(inner)  # type: ignore[arg-type]
    inner.lock = store._lock
    out = getattr(store, name)(*CALLS[name])
    if name == "iter_ids":  # drained before the lock is let go
        assert inner.held == {name: True, "iter_ids:a": True, "iter_ids:b": True}
        assert list(out) == ["a", "b"]
    else:
        assert inner.held == {name: True}


class Bulk:
    def __init__(self) -> None:
        self.inside = False

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        self.inside = True
        yield
        self.inside = False


def test_a_build_through_the_lock_still_writes_in_the_stores_bulk_mode() -> None:
    inner = Bulk()
    with bulk_writes(LockedStore(inner)):  # type: ignore[arg-type]
        assert inner.inside
    assert not inner.inside
    with bulk_writes(LockedStore(object())):  # type: ignore[arg-type]
        pass  # a store without a bulk mode: nothing to enter


def test_lock_store_defers_the_index_builds_of_a_store_that_can() -> None:
    class Deferring(Bulk):
        deferred = False

        def defer_optimize(self) -> None:
            self.deferred = True

    inner = Deferring()
    assert lock_store(inner).inner is inner  # type: ignore[arg-type]
    assert inner.deferred
