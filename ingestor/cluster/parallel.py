"""Worker processes for a build's independent work: reading and chunking its files (a stream of
tasks, :meth:`WorkerPool.imap`), the local step of each global cluster, the UMAP transform of a
layer's points, block by block, and extractive summaries.

A task is a pure function of what it is given (a few files; a group's rows and its own seed; a
block of rows; a few clusters' texts), and results are taken in task order, so a build is the
same with any number of workers; only its time changes. Blocks have a fixed size,
:data:`BLOCK_ROWS`, never derived from the worker count.

Processes, not threads: UMAP's numba kernels and scikit-learn's EM hold the GIL most of the time.
They are *spawned* (a fresh interpreter each), never forked: the daemon that builds runs watcher
and HTTP threads (and torch's), and a fork would copy their locks in whatever state they were.
Each worker runs BLAS, OpenMP and numba on one thread (the pool already uses the cores), ignores
SIGINT (its parent stops it) and exits when its parent dies.

A pool starts lazily, when the work is worth a process start (a worker imports numpy, sklearn,
umap and numba: ~2-3 s of CPU each): :meth:`WorkerPool.map` runs in this process with one worker,
one task, or fewer than :data:`MIN_PARALLEL_ROWS` rows of work. Inside :func:`shared_pools` (a tree
build) a started pool serves every layer and is shut down at the end; outside it, for one fit.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any, Final, TypeVar

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.threads import one_thread
from ingestor.waiting import wait_interruptibly
from retriever.heap import limit_heap_arenas

log = logging.getLogger(__name__)

__all__ = [
    "BLOCK_ROWS",
    "MIN_PARALLEL_ROWS",
    "WorkerPool",
    "available_cores",
    "init_worker",
    "restore_index",
    "shared_pools",
    "transform_in_blocks",
    "worker_count",
    "worker_pool",
]

#: Rows per UMAP transform task: bounds a transform's memory, and is the same for every worker
#: count, so blocked results are too (UMAP's transform weighs a point's edges against the
#: strongest edge of its call: a block's result depends on the block, not on who computes it).
#: Small enough that a layer's blocks share out evenly (26.5k leaves: 16,384 rows made one block
#: of 16,384 and one of 5,108, so two workers waited on the first for ~3/4 of the transform).
BLOCK_ROWS: Final = 4_096
#: Below this many rows of work a pool is not started (its start costs more than it saves); a
#: pool already started (in :func:`shared_pools`) takes any work of two tasks or more.
MIN_PARALLEL_ROWS: Final = 8_192
#: Variables read by BLAS, OpenMP and numba when they load: one thread each in a worker.
_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
)
#: Why a worker process may have died.
_DIED = (
    "it died (killed, out of memory?). Spawned workers import the main script: one without "
    '`if __name__ == "__main__":` runs again in each of them; add it, or use 1 worker '
    "(ADRAP_BUILD__WORKERS=1)"
)
#: How often a worker checks that its parent is alive (seconds).
_PARENT_POLL = 0.5

T = TypeVar("T")
R = TypeVar("R")


def available_cores() -> int:
    """The number of cores this process may run on (its CPU affinity)."""
    return len(os.sched_getaffinity(0))


def worker_count(setting: int | None) -> int:
    """Resolve ``build.workers``: None or 0 means every core the process may use."""
    return setting if setting else available_cores()


class WorkerPool:
    """Up to ``workers`` spawned processes, started at the first :meth:`map` worth them.

    Args:
        workers: the most processes to run at once; 1 runs everything in this process.
    """

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers!r} must be >= 1; 0 in settings means every core")
        self.workers = workers
        self._executor: ProcessPoolExecutor | None = None

    @property
    def started(self) -> bool:
        """Whether worker processes are running."""
        return self._executor is not None

    def map(
        self,
        fn: Callable[[T], R],
        tasks: Iterable[T],
        *,
        count: int,
        rows: int,
        what: Callable[[int], str],
    ) -> list[R]:
        """Return ``[fn(t) for t in tasks]``, in task order, computed by the workers when worth it.

        Tasks are drawn from ``tasks`` as workers free up (at most two per worker wait), so a
        generator of row copies holds only those. ``fn`` must be a module-level function, and
        tasks and results picklable.

        Args:
            fn: the task function.
            tasks: ``count`` tasks.
            count: how many tasks ``tasks`` yields.
            rows: the work's size in rows, which decides whether to start processes.
            what: names task i in an error (``"local step of global cluster 3 (812 points)"``).

        Raises:
            The task's exception, with a note naming the task (and, from a worker, the worker's
            traceback as its cause); ``BrokenProcessPool`` when a worker died (killed, out of
            memory), with the same note.
        """
        return list(self.stream(fn, tasks, count=count, rows=rows, what=what))

    def stream(
        self,
        fn: Callable[[T], R],
        tasks: Iterable[T],
        *,
        count: int,
        rows: int,
        what: Callable[[int], str],
    ) -> Iterator[R]:
        """:meth:`map`, yielding each result in task order as it comes: a consumer that lets
        each result go holds a few at a time (at most two per worker wait)."""
        worth = self.started or rows >= MIN_PARALLEL_ROWS
        if self.workers < 2 or count < 2 or not worth:
            return self._map_here(fn, tasks, what)
        return self._map_workers(fn, iter(tasks), what, ahead=2)

    def imap(
        self,
        fn: Callable[[T], R],
        tasks: Iterable[T],
        *,
        least: int,
        what: Callable[[int], str],
        ahead: int = 2,
    ) -> Iterator[R]:
        """Yield ``fn(t)`` for each task, in task order, as results come: :meth:`map` for a
        stream of tasks whose number is not known up front (a folder's files as it is listed).

        Processes start (if not started yet) only once ``least`` tasks have been drawn; a
        stream that ends before runs in this process. At most ``ahead`` tasks per worker are
        submitted and not yet consumed, so the workers run that far ahead of a consumer busy
        with each result, and a stream's results are held a few at a time; a consumer that
        stops early leaves the pool running, with nothing more submitted.
        """
        it = iter(tasks)
        head = list(itertools.islice(it, max(least, 2) if not self.started else 2))
        if self.workers < 2 or len(head) < 2 or (len(head) < least and not self.started):
            yield from self._map_here(fn, itertools.chain(head, it), what)
            return
        yield from self._map_workers(fn, itertools.chain(head, it), what, ahead=ahead)

    def _map_workers(
        self, fn: Callable[[T], R], tasks: Iterator[T], what: Callable[[int], str], *, ahead: int
    ) -> Iterator[R]:
        executor = self._start()
        results: dict[int, R] = {}
        pending: dict[Future[R], int] = {}
        ready = 0  # the next result to hand out
        try:
            for i, task in enumerate(tasks):
                pending[executor.submit(fn, task)] = i
                while True:
                    while ready in results:
                        yield results.pop(ready)
                        ready += 1
                    if len(pending) + len(results) < ahead * self.workers:
                        break
                    self._collect(pending, results, what)  # the next result is pending
            while pending:
                self._collect(pending, results, what)
                while ready in results:
                    yield results.pop(ready)
                    ready += 1
        except BaseException as exc:
            for future in pending:
                future.cancel()
            if isinstance(exc, GeneratorExit):  # the consumer stopped early: the pool stays
                raise
            # A failed task, Ctrl-C or exit: stop now, not after the running tasks (a block can
            # take minutes; tasks are pure functions, so nothing is lost with them).
            self.close(kill=True)
            raise

    def close(self, *, kill: bool = False) -> None:
        """Stop the workers (``kill``: at once, dropping their tasks); a later map starts anew."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if kill:
            # ProcessPoolExecutor (before Python 3.14's kill_workers) has no public way to stop a
            # running task; its process table is the one handle on the workers.
            for process in list(getattr(executor, "_processes", {}).values()):
                process.kill()
        executor.shutdown(wait=True, cancel_futures=True)
        log.debug("stopped %d build workers", self.workers)

    def _start(self) -> ProcessPoolExecutor:
        if self._executor is None:
            log.info("starting %d build worker processes", self.workers)
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=get_context("spawn"),
                initializer=init_worker,
                initargs=(os.getpid(),),
            )
        return self._executor

    @staticmethod
    def _map_here(
        fn: Callable[[T], R], tasks: Iterable[T], what: Callable[[int], str]
    ) -> Iterator[R]:
        for i, task in enumerate(tasks):
            with one_thread("blas"):  # as in a worker: a second BLAS thread only spins
                try:
                    result = fn(task)
                except Exception as exc:
                    exc.add_note(f"while running the {what(i)}")
                    raise
            yield result

    @staticmethod
    def _collect(
        pending: dict[Future[R], int],
        results: dict[int, R],
        what: Callable[[int], str],
    ) -> None:
        done, _ = wait_interruptibly(pending, FIRST_COMPLETED)  # Ctrl-C: see ingestor.waiting
        for future in sorted(done, key=pending.__getitem__):  # the first task's error first
            i = pending.pop(future)
            try:
                results[i] = future.result()
            except BrokenProcessPool as exc:
                exc.add_note(f"while running the {what(i)} in a build worker process: {_DIED}")
                raise
            except Exception as exc:
                exc.add_note(f"while running the {what(i)} in a build worker process")
                raise


def init_worker(parent: int) -> None:
    """Set up a spawned worker of ``parent``: one BLAS/OpenMP/numba thread, Ctrl-C ignored (the
    parent stops it), and an exit as soon as the parent is gone (the reader processes too)."""
    limit_heap_arenas()
    for name in _THREAD_VARIABLES:  # for the libraries this worker has not loaded yet
        os.environ[name] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)  # for those it has (numpy's BLAS, loaded with this module)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    # A worker waits on its task queue forever if its parent is killed: leave then, not later.
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL)
    os._exit(1)


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[WorkerPool]:
    """A pool of ``workers``: the one kept by :func:`shared_pools` for this thread, if open (and
    left running), else a new one, closed on exit (see :func:`_closing`)."""
    kept: dict[int, WorkerPool] | None = getattr(_scope, "pools", None)
    if kept is not None:
        yield kept.setdefault(workers, WorkerPool(workers))
        return
    pool = WorkerPool(workers)
    with _closing([pool]):
        yield pool


@contextlib.contextmanager
def shared_pools() -> Iterator[None]:
    """A block (a tree build) whose fits share their worker pools, closed when it ends (see
    :func:`_closing`)."""
    if getattr(_scope, "pools", None) is not None:  # nested: the outer block owns them
        yield
        return
    pools: dict[int, WorkerPool] = {}
    _scope.pools = pools
    try:
        with _closing(pools.values()):
            yield
    finally:
        _scope.pools = None


_scope = threading.local()


@contextlib.contextmanager
def _closing(pools: Iterable[WorkerPool]) -> Iterator[None]:
    """Close ``pools`` when the block ends; one left by an error (a task's, or the consumer's
    between results: Ctrl-C while it places a fit) kills its workers, not waiting for their
    tasks (pure functions: nothing is lost with them)."""
    try:
        yield
    except BaseException:
        for pool in pools:
            pool.close(kill=True)
        raise
    for pool in pools:
        pool.close()


def restore_index(reducer: Any) -> Any:
    """Point a UMAP's exact kNN index back at its training rows after a pickle round trip (the
    index leaves them out: they are the UMAP's ``_raw_data`` too). Returns ``reducer``."""
    if reducer is not None:
        reducer._knn_search_index.data = reducer._raw_data
    return reducer


def transform_in_blocks(
    pool: WorkerPool,
    reducer: Any,
    X: NDArray[np.float32],
    rows: NDArray[np.intp],
    *,
    what: str,
    serial: bool,
) -> NDArray[np.float32]:
    """Return the (n, c) UMAP embedding of the n rows ``rows`` of X, transformed in blocks of
    :data:`BLOCK_ROWS` rows, each on its own (the same result for any worker count). ``serial``
    runs numba on one thread (seeded UMAP: see ``umap_call``)."""
    n = len(rows)
    starts = range(0, n, BLOCK_ROWS)
    tasks = ((reducer, X[rows[s : s + BLOCK_ROWS]], what, serial) for s in starts)

    def name(i: int) -> str:
        last = min(starts[i] + BLOCK_ROWS, n) - 1
        return f"{what}, rows {starts[i]}-{last} of {n}"

    blocks = pool.map(_transform_block, tasks, count=len(starts), rows=n, what=name)
    return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


def _transform_block(task: tuple[Any, NDArray[np.float32], str, bool]) -> NDArray[np.float32]:
    from ingestor.cluster.umap_reduce import load_umap, umap_call  # not for every worker's start

    reducer, X, what, serial = task
    load_umap()  # numba's disk cache for UMAP's kernels, in a worker too (else ~1.5 s compiling)
    with umap_call(f"{what} ({len(X)} points)", serial=serial):
        return np.asarray(restore_index(reducer).transform(X), dtype=np.float32)
