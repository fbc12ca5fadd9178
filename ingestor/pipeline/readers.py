"""Reader processes: every file read and chunked away from the daemon, under its budget.

A file is converted and chunked in a reader process (:mod:`ingestor.pipeline.reader_process`),
so a converter that runs away (a 714-byte ``.ods`` whose one cell repeats a billion times, a
regex that backtracks for hours) takes that process with it, not the daemon, its HTTP server or
its lock; past the budget (:mod:`ingestor.pipeline.budget`) the reader is killed, the file is
refused, a fresh reader goes on with the next one. A reader is also replaced after
``budget.files`` files (whatever a converter leaked or cached goes with it).

Readers are *spawned*, never forked (the daemon runs threads), with the build workers' set-up
(:func:`~ingestor.cluster.parallel.init_worker`: one BLAS thread, Ctrl-C left to the parent, exit
when the parent dies). A task is :func:`~ingestor.read.documents.read_then`'s (the path: the
reader opens the file as the build always did) and so is its result: a tree is the same whoever
read its files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing import get_context
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Final, TypeVar

from ingestor.errors import IngestError, SourceError
from ingestor.pipeline.budget import (
    ReadBudget,
    ReadBudgetError,
    ReadStopped,
    died_reason,
)
from ingestor.pipeline.chunker import ChunkedDocument, Chunker
from ingestor.pipeline.reader_process import serve
from ingestor.read.documents import Document, ReadOptions, ReadTask, ReadThen
from ingestor.read.listing import source_name

__all__ = ["ReadWorkers", "read_files"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Files sent to a reader ahead of its results: enough to keep it reading while the consumer
#: embeds the leaves of those before (the build's workers read 64 ahead), few enough that a
#: killed reader's rest is cheap to resend.
PER_READER: Final = 32
#: Reading time (summed over files) after which a map starts its other readers: a reader's
#: start costs ~1 s of CPU, more than reading a few thousand text files.
PARALLEL_READ_SECONDS: Final = 3.0
#: How often a wait for readers wakes to check the time limits, the stop event and Ctrl-C.
SLICE: Final = 0.2
#: Seconds reading may go on once the daemon is asked to stop; then the readers are killed. Long
#: enough for the batch in hand to be read by a started reader (the daemon starts one ahead,
#: :meth:`ReadWorkers.warm`), short enough for SIGTERM to end the daemon within seconds.
STOP_GRACE: Final = 3.0
#: Seconds a retiring reader is given to exit by itself before it is killed.
EXIT_WAIT: Final = 2.0
#: Seconds of watching the readers, after the consumer held this thread, before a reader is
#: judged over its time: one blocked sending an answer while nobody read gets to send it first.
SETTLE: Final = 1.0


def read_files(
    readers: ReadWorkers,
    paths: Sequence[Path],
    root: Path,
    options: ReadOptions,
    chunker: Chunker | None,
    *,
    workers: int = 1,
) -> Iterator[Document | SourceError]:
    """The document of each of ``paths`` (with the leaves ``chunker`` made of it: how the
    collector reads the files of an update), or the SourceError that refused it (one over its
    budget: ReadBudgetError), in order, read by up to ``workers`` readers (more than one only
    once reading has taken :data:`PARALLEL_READ_SECONDS`: an update of a few files starts no
    process).

    Raises:
        ReadStopped: the daemon is stopping.
    """
    tasks = ((path, root, None, options, chunker or _unchunked) for path in paths)
    for _, item, leaves in readers.map(tasks, workers=workers):
        if isinstance(item, SourceError) or chunker is None or leaves is None:
            yield item
        else:
            yield ChunkedDocument.of(item, leaves, chunker)


def _unchunked(doc: Document) -> None:
    """No leaves (a reader's ``then`` where nothing chunks)."""


class Reader:
    """One reader process and the tasks sent to it, oldest first."""

    def __init__(self, budget: ReadBudget) -> None:
        ctx = get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=serve,
            args=(child, os.getpid(), budget.memory_bytes),
            name="adrap-reader",
            daemon=True,  # multiprocessing kills it at exit; it also leaves when its parent dies
        )
        self.process.start()
        child.close()
        self.sent: deque[tuple[int, ReadTask[Any]]] = deque()
        self.started: float | None = None  # when it began its oldest task (time.monotonic)
        self.files = 0  # tasks sent over its life
        self.reading = False  # it began a file once (a death before that is not a file's)

    def send(self, index: int, task: ReadTask[Any]) -> None:
        self.conn.send((index, task))
        self.sent.append((index, task))
        self.files += 1

    def stop(self, *, kill: bool) -> None:
        """Kill it, or ask it to exit (it holds no task) and kill it if it does not."""
        if not kill:
            with contextlib.suppress(OSError):  # gone already: joined below
                self.conn.send(None)
            self.process.join(EXIT_WAIT)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


class ReadWorkers:
    """Reader processes that read and chunk files, each file under ``budget``.

    One caller at a time (the build, or the daemon's writer under its lock). Readers start when
    first needed; one is kept between calls, so the daemon's next file pays no start.
    """

    def __init__(self, budget: ReadBudget) -> None:
        self.budget = budget
        self.readers: list[Reader] = []
        self._stop: threading.Event | None = None
        self._stop_seen: float | None = None

    def stop_when(self, stop: threading.Event) -> None:
        """Cut reading short once ``stop`` is set: reading still going :data:`STOP_GRACE` s
        later has its readers killed and raises :class:`ReadStopped` (as any read after)."""
        self._stop = stop
        self._stop_seen = None

    def map(self, tasks: Iterable[ReadTask[T]], *, workers: int = 1) -> Iterator[ReadThen[T]]:
        """Yield ``read_then(task)`` of each task, in task order, read by up to ``workers``
        readers (the others start once reading has taken :data:`PARALLEL_READ_SECONDS`).

        A file over the budget yields ``(path, ReadBudgetError, None)``. Tasks are drawn as
        readers free up, at most :data:`PER_READER` per reader ahead of the consumer.

        Raises:
            ReadStopped: the daemon is stopping (every reader is killed).
            The exception of a task that failed other than by a SourceError (a bug), with the
            reader's traceback as a note.
        """
        run = _Run(self, iter(tasks), max(1, workers))
        try:
            yield from run.results()
        except BaseException:
            # an error, Ctrl-C, a stop, or a consumer that stopped early: a reader still holding
            # tasks would answer them to the next map, so it goes (tasks are pure: nothing lost)
            for reader in [r for r in self.readers if r.sent]:
                self.drop(reader, kill=True)
            raise
        finally:
            for reader in [r for r in self.readers if not r.sent][1:]:  # a build's extra ones
                self.drop(reader, kill=False)

    def close(self) -> None:
        """Stop every reader (a later read starts a fresh one)."""
        for reader in list(self.readers):
            self.drop(reader, kill=bool(reader.sent))

    def stopping(self, now: float) -> bool:
        """True once the stop event has been set for longer than :data:`STOP_GRACE`."""
        if self._stop is None or not self._stop.is_set():
            return False
        if self._stop_seen is None:
            self._stop_seen = now
        return now - self._stop_seen > STOP_GRACE

    def warm(self) -> None:
        """Start a reader now if none runs, so the next read does not wait for one to start
        (a spawned Python's imports: seconds on a busy machine, e.g. in a stop's grace)."""
        if not self.readers:
            self.start()

    def start(self) -> Reader:
        reader = Reader(self.budget)
        self.readers.append(reader)
        log.debug("started reader process %d", reader.process.pid)
        return reader

    def drop(self, reader: Reader, *, kill: bool) -> None:
        reader.stop(kill=kill)
        self.readers.remove(reader)


class _Run:
    """One :meth:`ReadWorkers.map`: tasks out to readers, results back in task order."""

    def __init__(self, owner: ReadWorkers, tasks: Iterator[ReadTask[Any]], workers: int) -> None:
        self.owner = owner
        self.budget = owner.budget
        self.tasks = tasks
        self.workers = workers
        self.want = 1  # readers to use now; ``workers`` once reading has taken long enough
        self.todo: deque[tuple[int, ReadTask[Any]]] = deque()  # drawn, not sent (resent first)
        self.done: dict[int, ReadThen[Any]] = {}
        self.drawn = 0
        self.exhausted = False
        self.busy = 0.0  # seconds the readers spent reading, summed over files
        self.last_wait = 0.0  # when the last wait ended (the consumer has run since)
        self.watching = 0.0  # since when the readers have been watched without a break

    def results(self) -> Iterator[ReadThen[Any]]:
        ready = 0
        while True:
            while not self.exhausted and self.drawn - ready < PER_READER * self.want:
                task = next(self.tasks, None)
                if task is None:
                    self.exhausted = True
                else:
                    self.todo.append((self.drawn, task))
                    self.drawn += 1
            self._dispatch()
            while ready in self.done:
                yield self.done.pop(ready)
                ready += 1
            if self.exhausted and ready == self.drawn:
                return
            self._wait()

    def _dispatch(self) -> None:
        if self.todo and self.owner.stopping(time.monotonic()):
            raise ReadStopped("reading stopped: the daemon is stopping")
        while self.todo:
            fresh = [r for r in self.owner.readers if r.files < self.budget.files]
            free = [r for r in fresh if len(r.sent) < PER_READER]
            if free:
                reader = min(free, key=lambda r: len(r.sent))
            elif len(fresh) < self.want:
                reader = self.owner.start()
            else:
                break
            index, task = self.todo.popleft()
            try:
                reader.send(index, task)
            except OSError:  # it died (between files, or killed from outside): replace it
                self.todo.appendleft((index, task))
                reader.process.join(EXIT_WAIT)
                self._died(reader)
        for reader in list(self.owner.readers):  # spent: replaced once it has answered all
            if reader.files >= self.budget.files and not reader.sent:
                self.owner.drop(reader, kill=False)

    def _wait(self) -> None:
        if time.monotonic() - self.last_wait > 2 * SLICE:
            self.watching = time.monotonic()
        busy = [r for r in self.owner.readers if r.sent]
        wait([r.conn for r in busy] + [r.process.sentinel for r in busy], timeout=SLICE)
        for reader in busy:  # Ctrl-C is raised in the wait above within SLICE s
            self._receive(reader)
        for reader in busy:
            if reader in self.owner.readers and not reader.process.is_alive():
                self._receive(reader)  # what it said before it went
                self._died(reader)
        now = self.last_wait = time.monotonic()
        settled = now - self.watching >= SETTLE
        for reader in [r for r in self.owner.readers if r.sent and r.started is not None]:
            if settled and now - (reader.started or now) > self.budget.seconds:
                index, task = reader.sent.popleft()
                self.done[index] = _refused(task, self.budget.time_reason)
                self._replace(reader)
        if self.owner.stopping(now):
            raise ReadStopped("reading stopped: the daemon is stopping")
        if self.want < self.workers and self.busy >= PARALLEL_READ_SECONDS:
            self.want = self.workers
            log.info("read for %.1f s; %d reader processes read the rest", self.busy, self.want)

    def _receive(self, reader: Reader) -> None:
        while reader.sent:
            try:
                if not reader.conn.poll():
                    return
                kind, index, value = reader.conn.recv()
            except (EOFError, OSError):
                return  # it died: its sentinel says so
            if kind == "start":
                reader.started, reader.reading = value, True
                continue
            if kind == "took":  # the reader's own time: not the consumer's between two waits
                self.busy += value
                continue
            head, task = reader.sent.popleft()
            if head != index:
                raise IngestError(f"a reader answered task {index} where {head} was due (a bug)")
            reader.started = None
            if kind == "done":
                self.done[index] = value
            elif kind == "memory":  # it exits by itself after a MemoryError
                self.done[index] = _refused(task, self.budget.memory_reason)
                self._replace(reader, kill=False)
                return
            else:  # "error": a bug, not the file's content; it stops the build as before
                raise value

    def _died(self, reader: Reader) -> None:
        """A reader that exited by itself: the file it was reading is refused, the rest resent."""
        code = reader.process.exitcode
        if reader.started is not None and reader.sent:
            index, task = reader.sent.popleft()
            self.done[index] = _refused(task, lambda name: died_reason(name, code))
        elif not reader.reading:
            self.owner.drop(reader, kill=True)
            raise IngestError(
                f"a reader process exited with code {code} before reading any file; run the "
                "command with -v to see why (an import error in this installation?). From a "
                "script: spawned readers import the main script, and one without "
                '`if __name__ == "__main__":` around its work runs it again in each of them'
            )
        self._replace(reader)

    def _replace(self, reader: Reader, *, kill: bool = True) -> None:
        """Stop ``reader``; its other tasks go to the next one, first."""
        self.todo.extendleft(reversed(reader.sent))
        reader.sent.clear()
        self.owner.drop(reader, kill=kill)


def _refused(task: ReadTask[Any], reason: Any) -> ReadThen[Any]:
    """``task``'s result when its file is refused for ``reason(name)``."""
    path: Path = task[0]
    name = source_name(path, task[1]) or str(path)
    error = ReadBudgetError(reason(name))
    log.debug("refused %s: %s", name, error)
    return path, error, None
