"""Stages of a build that overlap through bounded queues: one stage's work runs on a thread while
the next stage's runs on the caller's.

:func:`ahead` runs a producer (a generator: the store's next batches read from the state
database, their payloads made) on a thread, at most :data:`DEPTH` items ahead of the consumer
(the upserts); :class:`Behind` runs calls (a batch's checkpoint write) on a thread, in order, at
most :data:`DEPTH` queued behind the stage that submits them (the next batch's embedding). The
queue bounds what is held: a few batches, not a stage's output.

Threads, not processes: what overlaps here releases the GIL for most of its time (SQLite's reads
and writes, numpy, the engine's writes, the model's forward pass), and the items are the build's
own objects, not copies. The order of items and calls is kept, so a build is the same with or
without the overlap; an error on the thread is raised in the caller, at the next item or call or
at the end, with the thread's traceback.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any, Final, TypeVar

__all__ = ["DEPTH", "Behind", "ahead"]

#: Items a stage's thread runs ahead of (or calls behind) its caller: two keep both sides busy
#: when their times vary batch to batch; more would only hold more.
DEPTH: Final = 2

T = TypeVar("T")

_END = object()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def ahead(items: Iterator[T], *, what: str, depth: int | None = None) -> Generator[T, None, None]:
    """Yield the items of ``items``, in order, made on a thread up to ``depth`` (default
    :data:`DEPTH`) ahead of the consumer.

    ``items`` runs on that thread only: the state it reads must not be touched by the consumer
    meanwhile. A consumer that stops early (or fails) stops the producer at its next item and
    waits for it. ``what`` names the stage in the thread's name and in an error's note.
    """
    size = DEPTH if depth is None else depth
    out: queue.Queue[Any] = queue.Queue(maxsize=max(1, size))
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if not _put(out, item, stop):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            _put(out, _Failed(exc), stop)
            return
        _put(out, _END, stop)

    thread = threading.Thread(target=produce, name=f"adrap {what}", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                item.exc.add_note(f"while preparing the {what} on its thread")
                raise item.exc
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                out.get(timeout=0.05)
        thread.join()


def _put(out: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Put ``item``, waiting while the queue is full; False once the consumer has stopped."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


class Behind:
    """Runs calls on one thread, in the order submitted, at most ``depth`` waiting.

    :meth:`submit` blocks while ``depth`` calls wait (the stage that submits is never more
    than that far ahead of its writes); :meth:`wait` returns once every call has run. The first
    call that fails stops the thread: its error is raised by the next :meth:`submit` or by
    :meth:`wait`, and no later call runs. Use it as a context manager: leaving the block waits
    for the calls (an error leaving it waits too, then lets that error through).

    Args:
        what: names the stage in the thread's name and in an error's note.
        depth: calls that may wait (default :data:`DEPTH`).
    """

    def __init__(self, what: str, depth: int | None = None) -> None:
        self.what = what
        self._calls: queue.Queue[Any] = queue.Queue(
            maxsize=max(1, DEPTH if depth is None else depth)
        )
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"adrap {what}", daemon=True)
        self._thread.start()

    def __enter__(self) -> Behind:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if exc is None:
            self.wait()
        else:
            self._close()

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queue ``fn(*args)``, waiting while ``depth`` calls wait already."""
        self._raise()
        while True:
            try:
                self._calls.put((fn, args), timeout=0.05)
                return
            except queue.Full:
                self._raise()  # the thread stopped on an error: nothing more is taken

    def wait(self) -> None:
        """Return once every submitted call has run; raise the first one's error."""
        self._close()
        self._raise()

    def _close(self) -> None:
        if self._thread.is_alive():
            while True:
                try:
                    self._calls.put(_END, timeout=0.05)
                    break
                except queue.Full:
                    if not self._thread.is_alive():
                        break
            self._thread.join()

    def _raise(self) -> None:
        exc, self._error = self._error, None
        if exc is not None:
            exc.add_note(f"while running the {self.what} on its thread")
            raise exc

    def _run(self) -> None:
        while True:
            call = self._calls.get()
            if call is _END:
                return
            fn, args = call
            try:
                fn(*args)
            except BaseException as exc:  # raised in the caller
                self._error = exc
                return
