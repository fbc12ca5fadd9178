"""Work that yields the CPU to queries: a thread at a lower scheduling priority.

On Linux the nice value belongs to a thread (``setpriority(2)`` on its thread id), and the
threads a library starts from it afterwards (torch's OpenMP team, for one) start with it. So
writing work run in a thread with a higher nice value gets the whole machine while nobody asks and
yields it while a question runs. Measured on 2 cores, the packaged model embedding without pause
(a question's own embedding, 14 ms alone): at the writer's priority a question took 1.93x; from
a thread at nice 10, 1.33x; at 19, 1.24x; the embedding alone as fast at 10 as at 0 (256 texts
7.1 s, 7.4 s). ``SCHED_IDLE`` measured as nice 19 (a store-only question of 1 ms: 1.82x against
1.77x; what is left is the cores' shared caches).

The update worker lowers its own thread's priority for its life (:func:`lower_thread_priority`,
``ADRAP_WATCH__WRITER_NICE``); a model change, which runs where a writer opens the tree (the
daemon's start, a command), embeds, indexes and refits through :class:`Background`: its own
thread, lowered by the same setting, which ends with the work, so the caller's thread keeps its
priority (an unprivileged process may lower a thread's priority, never raise it back). On other
systems ``setpriority`` names processes, not threads: the work runs at the caller's priority.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["Background", "lower_thread_priority", "thread_nice"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def thread_nice() -> int:
    """Return the calling thread's nice value (Linux; the process's elsewhere)."""
    who = threading.get_native_id() if sys.platform == "linux" else 0
    return os.getpriority(os.PRIO_PROCESS, who)


def lower_thread_priority(increment: int) -> int | None:
    """Raise the calling thread's nice value by ``increment`` (at most 19); return the new value,
    or None where that is not possible (other systems, or refused: the work runs as it is)."""
    if increment <= 0 or sys.platform != "linux":
        return None
    try:
        nice = min(19, thread_nice() + increment)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError as exc:  # a seccomp profile may forbid it: run at the normal priority
        log.warning(
            "cannot lower the writer's priority by %d (%s); queries may slow down while it "
            "works; set ADRAP_WATCH__WRITER_NICE=0 to skip this",
            increment,
            exc,
        )
        return None
    return nice


class Background:
    """One thread, its priority lowered by ``increment``, running the calls given to
    :meth:`run` one at a time while the caller waits; :meth:`close` ends it (use it in
    ``contextlib.closing``)."""

    def __init__(self, increment: int, name: str = "adrap-background") -> None:
        self._pool = ThreadPoolExecutor(
            1, thread_name_prefix=name, initializer=lower_thread_priority, initargs=(increment,)
        )

    def run(self, fn: Callable[..., T], /, *args: object) -> T:
        """Return ``fn(*args)`` run in the background thread (its exception raised here)."""
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
