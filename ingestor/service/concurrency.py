"""Sharing the pipeline between the update worker and queries, and stopping a first build.

:class:`LockedStore` serialises each call into the store (short: one upsert page, one search), so
a query waits at most for one store call of the writer, never for its whole batch. qdrant-edge is
an in-process engine whose documentation (Edge API, shard lifecycle) states no thread-safety
guarantee for concurrent calls on one ``EdgeShard``, hence the lock; a
Qdrant server client could go without it, and costs nothing with it.
"""

from __future__ import annotations

import threading
from typing import Any

from ingestor.tree.build import Progress


class Cancelled(Exception):
    """The daemon was asked to stop during a long stage (the first build); nothing was committed."""


def cancellable(progress: Progress, stop: threading.Event) -> Progress:
    """Return a progress callback that raises :class:`Cancelled` once ``stop`` is set."""

    def report(stage: str, done: int, total: int) -> None:
        if stop.is_set():
            raise Cancelled(f"stopped during {stage!r} ({done}/{total})")
        progress(stage, done, total)

    return report


class LockedStore:
    """A NodeStore proxy that holds a lock around every method call of the wrapped store."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        lock = self._lock

        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                result = attr(*args, **kwargs)
                if hasattr(result, "__next__"):  # an iterator (iter_ids): drain under the lock
                    return iter(list(result))
                return result

        return call

    @property
    def inner(self) -> Any:
        """The wrapped store (to ask what kind it is; call it through the proxy)."""
        return self._inner

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_inner", "_lock"):
            object.__setattr__(self, name, value)
        else:  # tests replace methods of the store (fault injection): forward to it
            setattr(self._inner, name, value)
