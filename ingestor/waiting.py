"""Waiting on futures in a way Ctrl-C can interrupt.

CPython raises a signal's exception (Ctrl-C's KeyboardInterrupt) in the main thread between two
bytecodes. A main thread blocked on a lock with no timeout (``concurrent.futures.wait`` without
one) wakes for the signal only if the signal lands in that very thread while it blocks. A signal
that lands just before it blocks (the process was descheduled there: a busy machine), or in
another thread (the kernel may hand a process-wide signal to any of them), leaves the Python
handler pending and the thread asleep until a future finishes: a build whose 10-minute tasks
ignore Ctrl-C for 10 minutes. Waiting in slices of :data:`SLICE` seconds bounds that delay.
"""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, Future, wait
from typing import Any, Final

__all__ = ["SLICE", "wait_interruptibly"]

#: The longest a pending Ctrl-C waits to be raised while futures run (seconds).
SLICE: Final = 0.2


def wait_interruptibly(
    futures: Collection[Future[Any]], return_when: str = ALL_COMPLETED
) -> tuple[set[Future[Any]], set[Future[Any]]]:
    """``concurrent.futures.wait(futures, return_when=...)`` with no timeout, returning
    ``(done, not_done)``, that raises a pending KeyboardInterrupt within :data:`SLICE` s."""
    while True:
        done, not_done = wait(futures, timeout=SLICE, return_when=return_when)
        if not not_done:
            return done, not_done
        if return_when == FIRST_COMPLETED and done:
            return done, not_done
        if return_when == FIRST_EXCEPTION and any(_raised(f) for f in done):
            return done, not_done


def _raised(future: Future[Any]) -> bool:
    return not future.cancelled() and future.exception() is not None
