"""The deadline of one HTTP request's work: past it, the work stops at its next lock and frees it.

An HTTP request answers 504 at its timeout, but the worker thread running its store calls cannot
be killed; without a deadline it ran on, taking the store lock the writer shares, call after call
(a postQFRAP query, a batch of Qdrant searches). Here the request's thread carries a
:class:`Deadline` (:meth:`Deadline.run`); every lock taken through :func:`holding` (the store's,
:class:`~ingestor.service.concurrency.LockedStore`, and the query embedder's, :class:`BoundedLock`)
is waited for at most until the deadline, and once it has passed (or the request was cancelled)
the next lock is not taken at all: :class:`DeadlineExceeded` unwinds the work, releasing every
lock it holds. A store call already running finishes (the engine cannot be interrupted); one call
is the most a timed-out request still costs the writer.

Threads without a deadline (the update worker, the CLI) take the locks as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_local = threading.local()


class DeadlineExceeded(TimeoutError):
    """The request's time is up (or it was cancelled): its work stops before the next lock."""


class Deadline:
    """The moment a request's work must stop, plus a flag to stop it earlier (``cancel``)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop the work at its next lock (the request was answered 504 or dropped)."""
        self._cancelled.set()

    def remaining(self) -> float:
        """Seconds left; 0 once passed or cancelled."""
        if self._cancelled.is_set():
            return 0.0
        return max(0.0, self.at - time.monotonic())

    def check(self, what: str) -> None:
        """Raise :class:`DeadlineExceeded` if no time is left.

        Raises:
            DeadlineExceeded: the deadline passed or the request was cancelled.
        """
        if self.remaining() <= 0.0:
            raise DeadlineExceeded(
                f"the request took longer than {self.seconds:g} s; stopped {what}"
            )

    def run(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` in this thread under this deadline (what the worker thread runs)."""
        before = getattr(_local, "deadline", None)
        _local.deadline = self
        try:
            return fn()
        finally:
            _local.deadline = before


def current() -> Deadline | None:
    """Return the deadline of the calling thread's request, or None (no deadline)."""
    found: Deadline | None = getattr(_local, "deadline", None)
    return found


@contextmanager
def holding(lock: Any, what: str = "the store") -> Iterator[None]:
    """Hold ``lock`` (a ``threading`` lock) for the block, waiting no longer than the deadline.

    Raises:
        DeadlineExceeded: the calling thread's deadline passed before or while waiting.
    """
    deadline = current()
    if deadline is None:
        with lock:
            yield
        return
    deadline.check(f"before waiting for {what}")
    if not lock.acquire(timeout=deadline.remaining() or 1e-6):
        raise DeadlineExceeded(
            f"the request took longer than {deadline.seconds:g} s waiting for {what}"
        )
    try:
        yield
    finally:
        lock.release()


class BoundedLock:
    """A lock whose ``with`` waits no longer than the calling thread's deadline (:func:`holding`)."""

    def __init__(self, what: str) -> None:
        self._lock = threading.Lock()
        self._what = what
        self._held = threading.local()

    def __enter__(self) -> None:
        cm = holding(self._lock, self._what)
        cm.__enter__()
        self._held.cm = cm

    def __exit__(self, *exc: object) -> None:
        cm = self._held.cm
        del self._held.cm
        cm.__exit__(*exc)
