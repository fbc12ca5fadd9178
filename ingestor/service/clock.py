"""The watch worker's sense of time: read the clocks, wait on the change queue.

The worker's timing (debounce, close grace, settle, retry backoff, idle maintenance) only reads
:meth:`Clock.monotonic` / :meth:`Clock.time` and waits in :meth:`Clock.get`, so a test can hand it
a clock it drives (virtual seconds pass when a wait finds nothing) instead of sleeping.
"""

from __future__ import annotations

import queue
import time
from typing import Protocol, TypeVar

__all__ = ["Clock", "SystemClock"]

T = TypeVar("T")


class Clock(Protocol):
    """What the watch worker needs of time."""

    def monotonic(self) -> float:
        """Return seconds on a clock that never goes back (deadlines, quiet periods)."""
        ...

    def time(self) -> float:
        """Return the wall-clock time in seconds since the epoch (compared with file mtimes)."""
        ...

    def get(self, items: queue.Queue[T], timeout: float) -> T:
        """Return the next item of ``items``, waiting up to ``timeout`` seconds.

        Raises:
            queue.Empty: nothing came within ``timeout``.
        """
        ...


class SystemClock:
    """The real clocks, and a real blocking wait on the queue (the default)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def get(self, items: queue.Queue[T], timeout: float) -> T:
        return items.get(timeout=timeout)
