"""Watch a folder and keep its tree up to date: events → queue → debounced batches → adRAP.

watchdog calls handlers in the observer thread, so :class:`EnqueueHandler` only puts paths on a
queue. One worker thread (:class:`Watcher`) waits for a quiet period, coalesces every path of the
burst into one set, drops ignored/hidden/temp names, and applies the set as ONE adRAP batch on the
state it keeps in memory. A batch that fails on a dependency (LLM, store, embedder, state commit)
commits nothing: the state is reloaded from disk, the paths stay pending and are retried with
exponential backoff.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from watchdog.events import (
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from ingestor.errors import SummarizationError, TreeError
from ingestor.pipeline import Pipeline, UpdateReport
from ingestor.read.documents import DEFAULT_IGNORE, Document
from ingestor.tree.state import TreeState
from models_store import ModelStoreError
from retriever import EmbeddingError, StoreError

log = logging.getLogger(__name__)

#: Failures of a dependency: the batch is not committed and is retried with backoff.
RETRIABLE: tuple[type[Exception], ...] = (
    SummarizationError,
    StoreError,
    EmbeddingError,
    TreeError,
    ModelStoreError,
)
_CHANGES = frozenset(
    {EVENT_TYPE_CREATED, EVENT_TYPE_DELETED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED}
)
_TICK = 0.25  # seconds between checks of the stop flag while idle


def make_observer(*, polling: bool = False, interval: float = 2.0) -> BaseObserver:
    """Return watchdog's native observer, or its polling one (NFS/SMB, Docker bind mounts)."""
    if polling:
        return PollingObserver(timeout=interval)
    return Observer()


class EnqueueHandler(FileSystemEventHandler):
    """Puts the path(s) of every change event on a queue; nothing else (it runs in watchdog's thread).

    Opened/closed/attribute events and directory "modified" events (a child changed, which has
    its own event) carry no content change and are not queued: reading a file must not trigger a
    batch.
    """

    def __init__(self, paths: queue.Queue[Path | None]) -> None:
        self.paths = paths

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _CHANGES:
            return
        if event.is_directory and event.event_type == EVENT_TYPE_MODIFIED:
            return
        self.paths.put(Path(os.fsdecode(event.src_path)))
        if event.event_type == EVENT_TYPE_MOVED:
            self.paths.put(Path(os.fsdecode(event.dest_path)))


class Watcher:
    """The worker: debounces queued paths into batches and applies each as one adRAP update.

    Args:
        pipeline: the pipeline whose store and models hold the tree.
        state: the committed state, kept in memory between batches.
        root: the watched folder (the tree's root).
        debounce: quiet seconds that end a burst.
        max_wait: longest a burst is coalesced before it is applied anyway (default 30 times debounce,
            at least 5 s), so a folder that never goes quiet is still indexed.
        ignore: glob patterns matched against each path component relative to ``root``.
        exclude: folders whose events are dropped (the state dir, if it is inside ``root``).
        lock: held around every use of the pipeline's store and embedder (shared with ``/query``).
        max_backoff: cap of the retry delay after a failed batch, seconds.
        on_applied: called in the worker, under ``lock``, after each applied batch.
        on_error: called with the exception class name after each failed batch.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        state: TreeState,
        root: Path,
        *,
        debounce: float = 1.0,
        max_wait: float | None = None,
        ignore: Sequence[str] = DEFAULT_IGNORE,
        exclude: Iterable[Path] = (),
        lock: threading.Lock | None = None,
        max_backoff: float = 60.0,
        on_applied: Callable[[UpdateReport, TreeState], None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.state = state
        self.root = Path(os.path.abspath(root))
        self.real_root = self.root.resolve()
        self.debounce = debounce
        self.max_wait = max_wait if max_wait is not None else max(5.0, 30 * debounce)
        self.ignore = tuple(ignore)
        self.exclude = [Path(os.path.abspath(p)) for p in exclude]
        self.lock = lock or threading.Lock()
        self.max_backoff = max_backoff
        self.on_applied = on_applied
        self.on_error = on_error
        self.paths: queue.Queue[Path | None] = queue.Queue()
        self.handler = EnqueueHandler(self.paths)
        self.batches = 0
        self.failures = 0
        self.last_report: UpdateReport | None = None
        self._retry: set[Path] = set()
        self._retry_at = 0.0
        self._backoff = 0.0
        self._in_hand = 0
        self._stale = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread."""
        self._thread = threading.Thread(target=self.run, name="adrap-watch-worker", daemon=False)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the worker to finish the batch in hand (and what is queued), then join it."""
        self._stopping.set()
        self.paths.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the watch worker did not stop within %s s", timeout)

    def pending(self) -> int:
        """Return the number of paths waiting: queued, in the batch in hand, or to be retried."""
        return self.paths.qsize() + self._in_hand + len(self._retry)

    def run(self) -> None:
        """The worker loop: batch, apply, repeat; after ``stop``, apply what is left once."""
        while not self._stopping.is_set():
            batch = self.next_batch()
            if batch:
                self._guarded(batch)
        rest = self._drain() | self._retry
        self._retry = set()
        if rest:
            log.info("applying the last %d pending paths before stopping", len(rest))
            self._guarded(rest)

    # -- batching --------------------------------------------------------------------------------

    def next_batch(self) -> set[Path]:
        """Block until a burst of events has been quiet for ``debounce`` seconds; return its paths.

        Paths waiting for a retry join the batch once their backoff has elapsed. Returns early
        (possibly empty) when the watcher is stopping.
        """
        batch: set[Path] = set()
        while not self._stopping.is_set():
            if self._retry and time.monotonic() >= self._retry_at:
                batch |= self._retry
                self._retry = set()
                break
            try:
                item = self.paths.get(timeout=_TICK)
            except queue.Empty:
                continue
            if item is not None:
                batch.add(item)
                break
        start = last = time.monotonic()
        while not self._stopping.is_set():
            now = time.monotonic()
            wait = min(last + self.debounce, start + self.max_wait) - now
            if wait <= 0:
                break
            try:
                item = self.paths.get(timeout=wait)
            except queue.Empty:
                break
            if item is not None:
                batch.add(item)
                last = time.monotonic()
        return batch

    def _drain(self) -> set[Path]:
        out: set[Path] = set()
        while True:
            try:
                item = self.paths.get_nowait()
            except queue.Empty:
                return out
            if item is not None:
                out.add(item)

    def wanted(self, path: Path) -> bool:
        """Return False for paths outside the root, ignored names, excluded folders, outward links."""
        path = Path(os.path.abspath(path))
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return False
        if any(fnmatch.fnmatch(part, pat) for part in rel.parts for pat in self.ignore):
            return False
        if any(path == ex or ex in path.parents for ex in self.exclude):
            return False
        if path.is_symlink():
            try:
                target = path.resolve(strict=False)
            except (OSError, RuntimeError) as exc:
                log.warning(
                    "skipped %s: symlink cannot be resolved (%s); fix or remove it", path, exc
                )
                return False
            if target != self.real_root and self.real_root not in target.parents:
                log.warning(
                    "skipped %s: symlink to %s, outside the watched folder; links are never "
                    "followed out of the root",
                    path,
                    target,
                )
                return False
        return True

    # -- applying --------------------------------------------------------------------------------

    def _guarded(self, batch: set[Path]) -> None:
        try:
            self.apply(batch)
        except Exception as exc:  # the worker must survive anything (the only broad except)
            # Lose nothing: like a dependency failure, retry the batch from the committed state
            # (a bug then shows as logged retries with backoff, not as a silently dropped file).
            log.exception("update of %d paths failed unexpectedly", len(batch))
            self._failed(sorted(batch), exc)

    def apply(self, batch: set[Path]) -> bool:
        """Apply one batch of paths as one adRAP update; return False if it must be retried.

        Must be called from one thread at a time (the worker, or a test instead of the worker).
        """
        paths = sorted(p for p in batch if self.wanted(p))
        if not paths:
            return True
        self._in_hand = len(paths)
        t0 = time.perf_counter()
        report = UpdateReport()
        try:
            with self.lock:
                try:
                    if self._stale:
                        self.state = self.pipeline.require_state(recover=True)
                        self._stale = False
                    docs, gone = self.pipeline.collect(self.state, paths, report)
                    gone.extend(self._now_unreadable(report))
                    self.pipeline.apply_batch(self.state, docs, gone, report)
                    if self.failures:  # an earlier failure may have left orphans after a commit
                        self.pipeline.reconcile_store(self.state)
                except RETRIABLE as exc:
                    self._failed(paths, exc)
                    return False
                report.seconds = time.perf_counter() - t0
                self.failures = 0
                self._backoff = 0.0
                self.batches += 1
                self.last_report = report
                if self.on_applied:
                    self.on_applied(report, self.state)
        finally:
            self._in_hand = 0
        self._recheck(docs)
        names = [p.relative_to(self.root).as_posix() for p in paths[:10]]
        more = f" (+{len(paths) - 10} more)" if len(paths) > 10 else ""
        log.info("applied update: %s; paths: %s%s", report.summary(), ", ".join(names), more)
        return True

    def _now_unreadable(self, report: UpdateReport) -> list[str]:
        """Sources in the tree whose file now fails to read: removed, as a fresh walk would do."""
        out = []
        for path, _reason in report.skipped:
            try:
                source = Path(path).relative_to(self.real_root).as_posix()
            except ValueError:
                continue
            if source in self.state.sources:
                out.append(source)
        return out

    def _failed(self, paths: list[Path], exc: Exception) -> None:
        """Discard the half-applied in-memory state and schedule the batch again."""
        self.failures += 1
        self._backoff = min(self.max_backoff, max(1.0, self._backoff * 2))
        self._retry.update(paths)
        self._retry_at = time.monotonic() + self._backoff
        log.warning(
            "update of %d paths failed (%s: %s); nothing was committed, retrying in %.0f s",
            len(paths),
            type(exc).__name__,
            exc,
            self._backoff,
        )
        if self.on_error:
            self.on_error(type(exc).__name__)
        self._stale = True  # the next batch starts from the committed state, reloaded

    def _recheck(self, docs: Iterable[Document]) -> None:
        """Queue again the files that changed or vanished while they were being read."""
        for doc in docs:
            path = self.real_root / doc.source
            try:
                st = path.stat()
            except OSError:
                st = None
            if st is None or st.st_size != doc.size or st.st_mtime != doc.mtime:
                log.info("%s changed while being read; it will be read again", doc.source)
                self.paths.put(path)
