"""Watch a folder and keep its tree up to date: events → queue → debounced batches → adRAP.

watchdog calls handlers in the observer thread, so :class:`EnqueueHandler` only puts changes on a
queue. One worker thread (:class:`Watcher`) waits for a quiet period, coalesces every path of the
burst into one set, drops ignored/hidden/temp names, and applies the set as ONE adRAP batch on the
state it keeps in memory. The quiet period is ``debounce``, or only ``close_grace`` when every
path of the burst was closed after its write or moved into place (native observer): a saved file
is then searchable in about its embedding time (:mod:`ingestor.service.intake`).

A failed batch commits nothing; the state is reloaded from disk, keeping the summaries the
failed attempt already paid for. Then, by the failure's kind (:mod:`ingestor.service.failures`):
transient -> the paths stay pending and are retried with exponential backoff; permanent or
unexpected -> the batch is split in halves until the offending path is alone, which is
quarantined, while the other paths land (:class:`~ingestor.service.intake.Redo`).

Every wait and every reading of time goes through an injectable
:class:`~ingestor.service.clock.Clock` (the real one by default), so tests drive time.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingestor.pipeline import Pipeline, UpdateReport
from ingestor.pipeline.repair import RepairRun, run_repairs
from ingestor.pipeline.vectors import removed_leaf_texts
from ingestor.read.documents import Document
from ingestor.read.listing import DEFAULT_IGNORE, source_path, source_text
from ingestor.service.clock import SystemClock
from ingestor.service.events import Change, EnqueueHandler, PathFilter, make_observer
from ingestor.service.failures import Quarantine, classify
from ingestor.service.intake import Burst, Redo, Settling, not_quarantined
from ingestor.service.large_docs import (
    EMBED_SLICE,
    LARGE_DOC_LEAVES,
    changed_since_read,
    large_groups,
)
from ingestor.service.watch_config import Hooks, Timing
from ingestor.tree.background import lower_thread_priority
from ingestor.tree.persist import shed_rows
from ingestor.tree.repair import RepairParams
from ingestor.tree.state import TreeState
from retriever.heap import release_freed_heap

if TYPE_CHECKING:
    from ingestor.service.share import DeletionGuard

log = logging.getLogger(__name__)

__all__ = ["EnqueueHandler", "Hooks", "Timing", "Watcher", "make_observer"]

_TICK = 0.25  # seconds between checks of the stop flag while idle
STEP_RETRY = 30.0  # seconds before a failed background step (a model change's copy) is retried
ROOM_RETRY = 2.0  # seconds between looks at the disk's free space while updates wait for it


class Watcher:
    """The worker: debounces queued paths into batches and applies each as one adRAP update.

    Args:
        pipeline: the pipeline whose store and models hold the tree.
        state: the committed state, kept in memory between batches.
        paths: which paths it takes: the watched folder (the tree's root) with its ignored
            names and excluded folders (the state dir); a bare folder: the default ignores.
        timing: when it takes a burst, retries, yields and sheds memory (default: the watch
            settings' defaults).
        hooks: what it tells its owner.
        lock: held around every batch (the writer's lock; queries never take it).
        guard: filters the deletions of a batch (the share guard); None deletes freely.
        quarantine: where permanently failing paths go (default: in memory only).
    """

    def __init__(
        self,
        pipeline: Pipeline,
        state: TreeState,
        paths: PathFilter | Path,
        timing: Timing | None = None,
        *,
        hooks: Hooks | None = None,
        lock: threading.Lock | None = None,
        guard: DeletionGuard | None = None,
        quarantine: Quarantine | None = None,
    ) -> None:
        t = timing or Timing()
        h = hooks or Hooks()
        self.pipeline = pipeline
        self.state = state
        self.filter = (
            paths if isinstance(paths, PathFilter) else PathFilter(paths, DEFAULT_IGNORE, ())
        )
        self.root = self.filter.root
        self.real_root = self.filter.real_root
        self.debounce = t.debounce
        grace, settle = t.close_grace, t.settle
        self.close_grace = None if settle > 0 or grace is None else min(grace, t.debounce)
        self.max_wait = t.max_wait if t.max_wait is not None else max(5.0, 30 * t.debounce)
        self.lock = lock or threading.Lock()
        self.clock = t.clock or SystemClock()
        self.redo = Redo(self.clock, t.max_backoff)
        self.on_applied = h.on_applied
        self.on_error = h.on_error
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.settling = Settling(settle, self.clock)
        self.guard = guard
        self.on_idle = h.on_idle
        self.room = h.room
        self.step = h.step
        self._step_next = 0.0  # a failed step is tried again from then (monotonic)
        self._short = False  # updates wait for disk space (said once, and when they go on)
        self.idle_after = t.idle_after
        self.nice = t.nice
        self.max_held_rows = t.max_held_rows
        self._active_at = self.clock.monotonic()
        self._idle_next = 0.0
        self.paths: queue.Queue[Change | None] = queue.Queue()
        self.handler = EnqueueHandler(self.paths)
        self.batches = 0
        self.failures = 0
        self.last_report: UpdateReport | None = None
        self._in_hand = 0
        self._stale = False
        self._paid: dict[str, str] = {}  # summaries of a failed attempt, for its retry
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
        """Return the number of paths waiting: queued, in hand, to be retried, split or settling."""
        return self.paths.qsize() + self._in_hand + len(self.redo) + len(self.settling)

    def enqueue(self, paths: Iterable[Path]) -> None:
        """Queue paths as if the observer had reported them (start-up changes, ``adrap retry``)."""
        for path in paths:
            self.paths.put(Change(path))

    def run(self) -> None:
        """The worker loop: batch, apply, repeat; after ``stop``, apply what is left once."""
        lower_thread_priority(self.nice)
        while not self._stopping.is_set():
            batch = self.next_batch()
            if batch:
                self._guarded(batch)
                self._active_at = self.clock.monotonic()
        rest = self._drain() | self.redo.take() | self.settling.take()
        if rest:
            log.info("applying the last %d pending paths before stopping", len(rest))
            self.settling.settle = 0.0
            self._guarded(rest)
            # isolate offenders even while stopping: the rest must land
            while (part := self.redo.next_part()) is not None:
                self._guarded(part)

    # -- batching --------------------------------------------------------------------------------

    def next_batch(self) -> set[Path]:
        """Block until a burst of events has been quiet long enough; return its paths.

        Quiet long enough: ``close_grace`` seconds if every path of the burst is complete (closed
        after its write, moved into place), else ``debounce``; at most ``max_wait`` in all. Halves
        of a failed batch come first; paths waiting for a retry join once their backoff has
        elapsed, and settling files once ``settle`` has passed. Returns early (possibly empty) when
        the watcher is stopping.
        """
        part = self.redo.next_part()
        if part is not None:
            return part
        burst = Burst(self.filter.named)
        while not self._stopping.is_set():
            now = self.clock.monotonic()
            retry = self.redo.due(now)
            if retry:
                burst.join(retry)
                break
            due = self.pipeline.collector.unread.due()
            if due:  # files that could not be read now: their backoff has elapsed
                burst.join(source_path(self.root, source) for source in due)
                break
            if self.settling.due(now):
                burst.join(self.settling.unsettled)
                break
            stepping = self.step is not None and now >= self._step_next
            try:
                item = self.clock.get(self.paths, 0.0 if stepping else _TICK)
            except queue.Empty:
                self._idle(now)  # maintenance goes on during steps: they are not updates
                if stepping:
                    self._step()
                continue
            if item is not None and burst.add(item):
                break
        start = last = self.clock.monotonic()
        while not self._stopping.is_set():
            grace = self.close_grace
            quiet = grace if grace is not None and burst.complete else self.debounce
            wait = min(last + quiet, start + self.max_wait) - self.clock.monotonic()
            if wait <= 0:
                break
            try:
                item = self.clock.get(self.paths, wait)
            except queue.Empty:
                break
            if item is not None and burst.add(item):
                last = self.clock.monotonic()
        return burst.paths

    def _step(self) -> None:
        """Run one step of :attr:`step` under the writer's lock; a failed one is logged and
        tried again after :data:`STEP_RETRY` seconds (an endpoint down must not stop updates)."""
        assert self.step is not None
        with self.lock:
            try:
                if self._stale:  # a failed update or pass left it half-applied
                    self._reload()
                more = self.step(self.state)
            except Exception:  # the watcher goes on; the step's own state is committed per step
                log.exception(
                    "a step of the writer's background work failed; retried in %d s", STEP_RETRY
                )
                self._step_next = self.clock.monotonic() + STEP_RETRY
                return
            if not more:
                self.step = None
                self._reload()

    def _idle(self, now: float) -> None:
        """Run ``on_idle`` (maintenance: the daemon builds the search index) once nothing has
        happened for ``idle_after`` seconds, and at most every ``idle_after`` seconds after."""
        quiet = now - self._active_at >= self.idle_after and now >= self._idle_next
        if self.on_idle is None or not quiet or self.pending():
            return
        self._idle_next = now + self.idle_after
        try:
            self.on_idle()
        except Exception:  # maintenance must never stop the watcher
            log.exception("idle maintenance failed; the watcher goes on")

    def _drain(self) -> set[Path]:
        out: set[Path] = set()
        while True:
            try:
                item = self.paths.get_nowait()
            except queue.Empty:
                return out
            if item is not None and item.changed:
                out.add(item.path)

    def wanted(self, path: Path) -> bool:
        """Return False for paths outside the root, ignored names and excluded folders.

        A link is wanted whatever it points to: reading it (``ingestor.read.opening``) refuses a
        link out of the root or a loop, and the refusal is listed with its reason (``adrap
        status``), as ``adrap build`` lists it; nothing outside the root is ever read.
        """
        return self.filter.named(path)

    # -- applying --------------------------------------------------------------------------------

    def _guarded(self, batch: set[Path], *, inline: bool = False) -> None:
        try:
            self.apply(batch, inline=inline)
        except Exception as exc:  # the worker must survive anything (the only broad except)
            log.exception("update of %d paths failed outside the batch", len(batch))
            self._failed(sorted(batch), exc)

    def apply(self, batch: set[Path], *, inline: bool = False) -> bool:
        """Apply one batch of paths as one adRAP update; return False if it did not land.

        A document with more than :data:`LARGE_DOC_LEAVES` leaves to embed is set aside and
        applied after the rest of the batch has landed (:meth:`_apply_large`), so a large file
        never holds up the small ones beside it or after it; ``inline``: apply every document
        in this batch (the batches served between a large document's slices).

        Must be called from one thread at a time (the worker, or a test instead of the worker).
        """
        wanted = sorted(Path(os.path.abspath(p)) for p in batch if self.wanted(p))
        paths = self.settling.settled(not_quarantined(wanted, self.root, self.quarantine))
        if not paths or self._wait_for_room(paths):
            return not paths
        self._in_hand = len(paths)
        t0 = time.perf_counter()
        report = UpdateReport()
        docs: list[Document] = []
        large: list[tuple[Document, list[str]]] = []
        try:
            with self.lock:
                try:
                    if self._stale:
                        self._reload()
                    docs, gone = self.pipeline.collect(
                        self.state, paths, report, self.quarantine.holds
                    )
                    if self.guard is not None:
                        gone = self.guard.allow(self.state, gone)
                    if not inline:
                        docs, large = self._set_aside_large(docs, gone)
                    self.pipeline.apply_batch(self.state, docs, gone, report)
                    if self.failures:  # an earlier failure may have left orphans after a commit
                        self.pipeline.reconcile_store(self.state)
                except Exception as exc:
                    self._failed(paths, exc)
                    return False
                self._landed(report, t0)
        finally:
            self._in_hand = 0
        self._recheck(docs)
        names = [source_text(p.relative_to(self.root).as_posix()) for p in paths[:10]]
        more = f" (+{len(paths) - 10} more)" if len(paths) > 10 else ""
        log.info("applied update: %s; paths: %s%s", report.summary(), ", ".join(names), more)
        for group in large_groups(large):
            self._apply_large(group)
        return True

    def _wait_for_room(self, paths: list[Path]) -> bool:
        """Hold ``paths``, unread, for :data:`ROOM_RETRY` s while ``room`` says none may write."""
        problem = None if self.room is None else self.room()
        if problem is not None and not self._short:
            log.warning("updates wait (%d paths): %s", len(paths), problem)
        elif problem is None and self._short:
            log.info("the disk has room again: applying the updates that waited")
        self._short = problem is not None
        if self._short:
            self.redo.soon(paths, ROOM_RETRY)
        return self._short

    def _landed(self, report: UpdateReport, t0: float) -> None:
        """Book a batch that landed (under the writer's lock)."""
        report.seconds = time.perf_counter() - t0
        self.failures = 0
        self.redo.landed()
        self._paid = {}
        self.batches += 1
        self.last_report = report
        if self.on_applied:
            self.on_applied(report, self.state)
        if self.max_held_rows is not None and shed_rows(self.state, self.max_held_rows):
            release_freed_heap()

    # -- large documents -------------------------------------------------------------------------

    def _set_aside_large(
        self, docs: list[Document], gone: list[str]
    ) -> tuple[list[Document], list[tuple[Document, list[str]]]]:
        """Split ``docs`` into those applied now and the large ones, with the leaf texts each
        would embed (an edit of a large file that changes a few chunks is not large, nor is a
        rename: the removed ``gone`` give their vectors back)."""
        now: list[Document] = []
        large: list[tuple[Document, list[str]]] = []
        reused = removed_leaf_texts(self.state, gone) if docs else set()
        for doc in docs:
            texts = self.pipeline.new_leaf_texts(self.state, doc, reused)
            if len(texts) > LARGE_DOC_LEAVES:
                large.append((doc, texts))
            else:
                now.append(doc)
        return now, large

    def _apply_large(self, group: list[tuple[Document, list[str]]]) -> None:
        """Apply large documents after the batch they came in, as one update: their leaves are
        embedded :data:`EMBED_SLICE` at a time outside the writer's lock, and between two slices
        the batches that arrived meanwhile land first; then the documents are applied with those
        vectors, but for those whose file changed meanwhile (queued again), those whose leaves
        could not be embedded (failed, as any file) and all when the watcher stops (nothing is
        recorded: the next start reads them again)."""
        t0 = time.perf_counter()
        known: dict[str, Any] = {}
        embedded: list[Document] = []
        for doc, texts in group:
            path = source_path(self.real_root, doc.source)
            for i in range(0, len(texts), EMBED_SLICE):
                if self._stopping.is_set():
                    log.info("stopping: %s is left for the next start", doc.source)
                    return
                self._in_hand = 1
                part = texts[i : i + EMBED_SLICE]
                try:
                    vectors = self.pipeline.context.embedder.embed_documents(part)
                except Exception as exc:
                    self._failed([path], exc)
                    break
                known.update(zip(part, vectors, strict=True))
                self._serve_arrivals()
            else:
                embedded.append(doc)
        report = UpdateReport()
        try:
            with self.lock:
                docs = []
                for doc in embedded:
                    path = source_path(self.real_root, doc.source)
                    if changed_since_read(doc, path):
                        log.info(
                            "%s changed while its leaves were embedded; read again", doc.source
                        )
                        self.paths.put(Change(path))
                    else:
                        docs.append(doc)
                if not docs:
                    return
                try:
                    if self._stale:
                        self._reload()
                    self.pipeline.apply_batch(self.state, docs, [], report, known)
                except Exception as exc:
                    self._failed([source_path(self.real_root, d.source) for d in docs], exc)
                    return
                self._landed(report, t0)
        finally:
            self._in_hand = 0
        names = ", ".join(d.source for d in docs[:10])
        log.info("applied large documents %s: %s", names, report.summary())

    def _serve_arrivals(self) -> None:
        """Apply the changes that arrived while a large document is embedded (once their burst
        is quiet), each document in them in line."""
        if self.paths.qsize() and not self._stopping.is_set():
            batch = self.next_batch()
            if batch:
                self._guarded(batch, inline=True)

    def refresh(
        self, due: Callable[[TreeState], bool], *, rewrite: bool = False
    ) -> UpdateReport | None:
        """Regenerate the stale summaries when ``due(state)`` (the daemon's summary schedule),
        under the writer's lock, between batches. A failure (the LLM endpoint) keeps them stale,
        and the summaries paid before it, for the next try; returns None then or when not due."""
        with self.lock:
            try:
                if self._stale:
                    self._reload()
                if not due(self.state):
                    return None
                report = self.pipeline.refresh(self.state, rewrite=rewrite)
            except Exception as exc:  # the worker must survive anything
                self._paid.update(self.state.summary_cache.pending_items())
                self._stale = True
                log.warning("regenerating stale summaries failed (%s); kept for the next try", exc)
                return None
            self._paid = {}
            if self.on_applied:
                self.on_applied(report, self.state)
        log.info("refreshed stale summaries: %s", report.summary())
        return report

    def repair(self, params: RepairParams, limit: int | None = 1) -> RepairRun | None:
        """Repair drifted subtrees (at most ``limit``, within the budget: tree.repair) under the
        writer's lock, between batches, each one committed. A failure keeps the tree as last
        committed (the state is read again) and is retried at the next idle time."""
        if params.tokens_per_hour <= 0:
            return None
        with self.lock:
            try:
                if self._stale:
                    self._reload()
                run = run_repairs(self.pipeline.context, self.state, params, limit=limit)
            except Exception as exc:  # the worker must survive anything
                self._stale = True
                log.warning("repairing a drifted subtree failed (%s); retried when idle", exc)
                return None
        if run.done:
            log.info("drift repair: %s", run.summary())
        return run

    def check_access(self) -> UpdateReport | None:
        """Apply permission changes (chmod, chown, setfacl, a folder's) found by reading every
        indexed file's permissions again, under the writer's lock (not waited for: the caller
        tries again); nothing is read, embedded or summarised. Return the pass's report (no
        file reclassed where nothing changed), or None where no pass ran (the writer busy, or
        the pass failed)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            try:
                if self._stale:
                    self._reload()
                report = self.pipeline.update_access(self.state)
            except Exception as exc:  # the worker must survive anything
                self._stale = True
                log.warning("applying permission changes failed (%s); retried next time", exc)
                return None
            if not report.files_reclassed:
                return report
            if self.on_applied:
                self.on_applied(report, self.state)
        finally:
            self.lock.release()
        log.info("permissions changed: %s", report.summary())
        return report

    def _reload(self) -> None:
        """Start again from the committed state, keeping the summaries already paid for."""
        fresh = self.pipeline.require_state(recover=True)
        cache = fresh.summary_cache
        carried = 0
        for key, text in self._paid.items():
            if key not in cache:
                cache[key] = text
                carried += 1
        if carried:
            log.info("kept %d summaries of the failed attempt for its retry", carried)
        self.state = fresh
        self._stale = False

    def _failed(self, paths: list[Path], exc: Exception) -> None:
        """Discard the half-applied state, then retry, split or quarantine by the failure's kind."""
        self.failures += 1
        kind = classify(exc)
        self._paid.update(self.state.summary_cache.pending_items())  # paid work survives
        # reloaded now (its early leaves leave the store), else by the next batch
        self._stale = True
        try:
            self._reload()
        except Exception as again:  # the store or state is down too
            log.warning("cannot reload the committed state yet (%s); the next batch will", again)
        if self.on_error:
            self.on_error(type(exc).__name__)
        if kind == "unexpected":
            log.error(
                "update of %d paths failed unexpectedly",
                len(paths),
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        path = self.redo.after(paths, kind, exc, self.filter)
        if path is not None:  # a lone file that failed for good
            try:
                source = source_text(path.relative_to(self.root).as_posix())
            except ValueError:
                source = str(path)
            self.quarantine.add(source, path, f"{kind}: {type(exc).__name__}: {exc}")

    def _recheck(self, docs: Iterable[Document]) -> None:
        """Queue again the files that changed or vanished while they were being read."""
        for doc in docs:
            path = source_path(self.real_root, doc.source)
            if changed_since_read(doc, path):
                log.info("%s changed while being read; it will be read again", doc.source)
                self.paths.put(Change(path))
