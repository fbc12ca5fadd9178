"""Sharing the pipeline between the update worker and queries, and stopping a first build.

:class:`LockedStore` serialises each call into the store (short: one upsert page, one search), so
a query waits at most for one store call of the writer, never for its whole batch.
:func:`lower_thread_priority` lets the update worker yield the CPU to queries: on 2 cores a query
spent two thirds of its time waiting for a core while the writer embedded. qdrant-edge is
an in-process engine whose documentation (Edge API, shard lifecycle) states no thread-safety
guarantee for concurrent calls on one ``EdgeShard``, hence the lock; a
Qdrant server client could go without it, and costs nothing with it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from ingestor.service.deadline import holding
from ingestor.tree.params import Progress

log = logging.getLogger(__name__)


def lower_thread_priority(increment: int) -> int | None:
    """Raise the calling thread's nice value by ``increment``; return the new value.

    On Linux the nice value belongs to a thread (``setpriority(2)`` on its thread id), and the
    threads it starts afterwards (torch's OpenMP team, for one) inherit it, so the update worker
    and its helpers yield to query threads while queries still get the whole machine when the
    writer is idle. Returns None where that is not possible (other systems, or refused).
    """
    if increment <= 0 or sys.platform != "linux":
        return None
    tid = threading.get_native_id()
    try:
        nice = min(19, os.getpriority(os.PRIO_PROCESS, tid) + increment)
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as exc:  # a seccomp profile may forbid it: run at the normal priority
        log.warning(
            "cannot lower the update worker's priority by %d (%s); queries may "
            "slow down during updates; set ADRAP_WATCH__WRITER_NICE=0 to skip this",
            increment,
            exc,
        )
        return None
    return nice


class Cancelled(Exception):
    """The daemon was asked to stop during a long stage (the first build); nothing was committed."""


def cancellable(progress: Progress, stop: threading.Event) -> Progress:
    """Return a progress callback that raises :class:`Cancelled` once ``stop`` is set."""

    def report(stage: str, done: int, total: int) -> None:
        if stop.is_set():
            raise Cancelled(f"stopped during {stage!r} ({done}/{total})")
        progress(stage, done, total)

    return report


def lock_store(store: Any) -> LockedStore:
    """Return ``store`` behind a lock per call (the daemon's), its index builds deferred to
    idle time (the daemon's maintenance), never inside an update."""
    if hasattr(store, "defer_optimize"):
        store.defer_optimize()
    return LockedStore(store)


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
            with holding(lock):  # a request past its deadline stops here (deadline.py)
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
