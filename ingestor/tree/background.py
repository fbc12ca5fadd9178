"""Work that yields the CPU to queries: one thread at a lower scheduling priority.

A model change embeds every node's text again while the daemon answers questions from the live
store. On a machine whose cores the embedding fills, a question waits for them: the packaged
model's copy on 2 cores made a question's embedding 1.93x slower (14 -> 27 ms). Linux weighs each
thread by its own nice value, and the threads a library starts from a thread (OpenMP's team for
torch's intra-op work, the engine's) start with its nice value; so work run in a thread at nice 19
gets the cores while nobody asks and little of them while a question runs: 1.33x (19 ms) at nice
10, 1.24x (18 ms) at 19, and the copy alone as fast as before (256 texts 7.4 s at nice 0, 7.1 s
at 10). ``SCHED_IDLE`` measured the same as nice 19 (a store-only question of 1 ms: 1.82x against
1.77x; what is left is the cores' shared caches), so the plain nice value is kept.

The priority is the thread's own and the thread ends with the work, so the caller's thread keeps
its priority (an unprivileged process may lower a thread's priority, never raise it back). On
other systems ``setpriority`` names processes, not threads, so the work runs at the caller's
priority there.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Final, TypeVar

__all__ = ["BACKGROUND_NICE", "Background", "thread_nice"]

log = logging.getLogger(__name__)

#: The nice value of background work's thread (the scheduler's weight 110 against a question's
#: 1024: it keeps ~10 % of a core a question wants).
BACKGROUND_NICE: Final = 19

T = TypeVar("T")


def thread_nice() -> int:
    """Return the calling thread's nice value (Linux; the process's elsewhere)."""
    who = threading.get_native_id() if sys.platform == "linux" else 0
    return os.getpriority(os.PRIO_PROCESS, who)


class Background:
    """One thread at nice :data:`BACKGROUND_NICE` (or the caller's, if that is higher) running
    the calls given to :meth:`run`, one at a time, while the caller waits; a context manager
    whose exit ends the thread."""

    def __init__(self, nice: int = BACKGROUND_NICE, name: str = "adrap-background") -> None:
        self.nice = nice
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name, initializer=self._lower)

    def _lower(self) -> None:
        if sys.platform != "linux":
            return
        tid = threading.get_native_id()
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < self.nice:
                os.setpriority(os.PRIO_PROCESS, tid, self.nice)
        except OSError as exc:  # a sandbox that forbids it: the work runs, only not yielding
            log.debug("background work keeps its priority: setpriority failed: %s", exc)

    def run(self, fn: Callable[..., T], /, *args: object) -> T:
        """Return ``fn(*args)`` run in the background thread (its exception raised here)."""
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Background:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
