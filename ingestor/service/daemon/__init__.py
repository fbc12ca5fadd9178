"""The ``adrap watch`` daemon: reconcile, watch, and serve health, metrics, status and queries.

HTTP: see :mod:`ingestor.service.http` (starlette + uvicorn, 127.0.0.1 by default); the
dashboard's routes (:mod:`ingestor.service.dashboard.routes`) and a read-only Qdrant REST API over
the tree's store, embedded or a server's collection (:mod:`ingestor.service.qdrant_rest`), are
mounted beside them.

Concurrency: the update worker holds ``self.lock`` (the writer's lock) for a whole batch, including
summarisation and rebuilds; queries never take it. Each call into the store is serialised by a
short lock of its own (:class:`~ingestor.service.concurrency.LockedStore`), and queries embed with
an embedder of their own, so ``/query`` answers at its normal latency during an update. Those
parts come ready (:class:`DaemonParts`, built by ``cli/factories.py``).
Queries and answers (``/query``, ``/ask``) run through
:class:`~ingestor.answer.service.QueryService`, the CLI's code path, over the locked store and
the query embedder, under a lock of their own (never the writer's).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette

from ingestor.answer.changes import ChangeFeed
from ingestor.answer.service import QueryService
from ingestor.config import Settings
from ingestor.errors import SourceUnavailableError
from ingestor.pipeline import Pipeline
from ingestor.pipeline.budget import ReadStopped
from ingestor.service.concurrency import Cancelled, LockedStore, cancellable
from ingestor.service.daemon.api import DaemonApi
from ingestor.service.daemon.app import daemon_app, is_embedded, start_server
from ingestor.service.events import PathFilter
from ingestor.service.failures import QUARANTINE_FILE, Quarantine
from ingestor.service.http import HttpLimits, HttpServer, UnixHttpServer
from ingestor.service.identity import Callers, socket_path
from ingestor.service.locking import StateLock
from ingestor.service.metrics import Metrics
from ingestor.service.mounts import polls_by_default
from ingestor.service.share import RootMonitor, ShareGuard
from ingestor.service.summary_schedule import SummarySchedule
from ingestor.service.watcher import Hooks, Timing, Watcher, make_observer
from ingestor.tree.model_progress import change_in
from ingestor.tree.params import Progress, no_progress
from ingestor.tree.persist import load_state, state_path
from ingestor.tree.repair import RepairParams
from ingestor.tree.state import TreeState
from retriever.heap import limit_heap_arenas
from retriever.room import MIB, free_bytes, free_files, room_problem

log = logging.getLogger(__name__)

#: At most this share of a core goes to the permission passes: the interval between two grows
#: with the pass's length (10,000 files: ~0.2 s a pass, every 2 s; 100,000: ~2.5 s, every 25 s).
#: An attribute event seen by the observer asks for a pass sooner (local file systems).
ACCESS_PASS_SHARE: Final = 0.1
#: Seconds a stopping daemon waits for a permission pass in hand (one on a hung share is left).
ACCESS_STOP_WAIT: Final = 10.0

QUERY_MODES = ("collapsed", "traversal")


@dataclass(frozen=True, slots=True)
class DaemonParts:
    """What the daemon serves, built once from the settings by the composition root
    (:func:`ingestor.cli.factories.make_daemon_parts`) and used as given: nothing here is
    replaced, rebound or patched by the daemon.

    Attributes:
        pipeline: the writer's pipeline, over ``store``; its apply stage asks ``summaries``
            whether an update's summaries wait (``Pipeline(defer_summaries=...)``).
        store: the node store behind a lock per call (:class:`LockedStore`), so ``/query``
            answers during an update; the pipeline's store and the queries' store are it.
        queries: answers ``/query`` and ``/ask`` over ``store``, with an embedder and a lock of
            its own (never the writer's: the writer's embedder is busy during updates).
        summaries: when stale summaries are regenerated, and the LLM budget.
        callers: who each request is (:mod:`ingestor.service.identity`).
        changes: reads the change log for ``/changes`` and the MCP tool, over ``queries``.
    """

    pipeline: Pipeline
    store: LockedStore
    queries: QueryService
    summaries: SummarySchedule
    callers: Callers
    changes: ChangeFeed

    def __post_init__(self) -> None:
        stores = (("pipeline", self.pipeline.context.store), ("queries", self.queries.store))
        for name, store in stores:
            if store is not self.store:
                raise ValueError(
                    f"DaemonParts: {name}.store is {type(store).__name__}, not the locked "
                    "store; build both over `store` (cli.factories.make_daemon_parts does)"
                )


class Daemon:
    """Owns the pipeline while ``adrap watch`` runs: reconciliation, observer, worker and HTTP.

    Args:
        parts: the pipeline, locked store, query service, summary schedule and callers, ready.
        root: the watched folder.
        settings: read for its ``watch`` section (observer, debounce, retries, HTTP; ``polling``
            None: poll only on a network or FUSE filesystem, :mod:`ingestor.service.mounts`),
            ``state_dir`` (the quarantine, the share record, the socket; never indexed),
            ``read.ignore``, ``access.check_seconds`` and ``qdrant.collection``.
        state_lock: the held writer lock; the daemon writes its HTTP address into it.
        owner_link: told the HTTP address once it serves (the CLI prints the owner's link).
        confirm_deletions: confirm a bulk deletion (past ``watch.max_delete_fraction``) in advance.
    """

    def __init__(
        self,
        parts: DaemonParts,
        root: Path,
        settings: Settings,
        *,
        state_lock: StateLock | None = None,
        owner_link: Callable[[str], None] | None = None,
        confirm_deletions: bool = False,
    ) -> None:
        w = self.watch = settings.watch
        self.pipeline = parts.pipeline
        self.store = parts.store
        self.queries = parts.queries
        self.summaries = parts.summaries
        self.callers = parts.callers
        self.root = root.resolve()
        self.polling = w.polling if w.polling is not None else polls_by_default(self.root)
        self.http_host = w.http_host
        self.http_port = w.http_port
        self.http_token = w.http_token.get_secret_value() if w.http_token else None
        self.limits = HttpLimits.of(w)
        self.socket = w.socket
        self.ignore = settings.read.ignore
        self.state_dir = settings.state_dir
        self.exclude = [self.state_dir.resolve()]
        self.collection = settings.qdrant.collection
        self.min_free_mb = settings.min_free_mb
        self.regenerate_at = settings.summary.min_change
        self.access_check_interval = settings.access.check_seconds
        self.state_lock = state_lock
        self.owner_link = owner_link
        self.lock = threading.Lock()  # the writer's: reconciliation and batches
        self._access_checked = 0.0  # when the last permission pass ended (monotonic)
        self._access_took = 0.0  # how long it took
        self._access_gap = self.access_check_interval  # until the next scheduled pass
        self._access_thread: threading.Thread | None = None  # the pass running, if any
        self._map_thread: threading.Thread | None = None  # the access map's fill, if any
        self.unix_server: UnixHttpServer | None = None
        self.quarantine = Quarantine(self.state_dir / QUARANTINE_FILE)
        self.guard = ShareGuard(
            self.root,
            self.state_dir,
            max_delete_fraction=w.max_delete_fraction,
            confirmed=confirm_deletions,
        )
        self.root_monitor = RootMonitor(
            self.guard,
            lambda: self.metrics.files,  # the writer's snapshot: the state is the writer's alone
            interval=w.root_check_interval,
        )
        db = state_path(self.pipeline.context.models, self.pipeline.context.tree)
        self.metrics = Metrics(self.pipeline.context.tree, lambda: change_in(db))
        a = settings.adrap
        self.repair = RepairParams(a.repair_drift, a.repair_tokens_per_hour, a.repair_max_leaves)
        self.metrics.repair_drift = a.repair_drift
        self.watcher: Watcher | None = None
        self.api = DaemonApi(
            self.metrics,
            self.summaries,
            self.queries,
            root=self.root,
            quarantine=self.quarantine,
            guard=self.guard,
            root_monitor=self.root_monitor,
            unread=lambda: self.pipeline.collector.unread,
            watcher=lambda: self.watcher,
            access_counts=lambda: self.pipeline.context.access.counts,
            changes=parts.changes,
            repair=self.repair,
            disk=self._disk,
        )
        self.registry = self.api.registry
        self.server: HttpServer | None = None
        self._stop = threading.Event()

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound HTTP address, once serving."""
        return None if self.server is None else self.server.address

    def pending(self) -> int:
        """Paths waiting to be applied."""
        return self.api.pending()

    def run(self, stop: threading.Event, progress: Progress = no_progress) -> None:
        """Serve HTTP, reconcile, then watch until ``stop`` is set; always stops every thread.

        A first build stops within seconds when ``stop`` is set (nothing is committed).

        Raises:
            IngestError, RetrieverError, ModelStoreError: reconciliation failed (nothing watched).
        """
        self._stop = stop
        self.pipeline.stop_reading_when(stop)  # a reader process busy with a file is killed
        # A reader ready before the first batch: the batch in hand at a SIGTERM is read within
        # the stop's grace instead of waiting for a reader to start.
        self.pipeline.warm_readers()
        limit_heap_arenas()  # before its threads (HTTP, watcher, writer) each take a heap
        self.start_http()
        try:
            try:
                state = self._reconcile(stop, progress)
            except (Cancelled, ReadStopped):
                log.info("stopped during the first build; nothing was committed")
                return
            observer = make_observer(
                polling=self.polling, interval=self.watch.poll_interval, root=self.root
            )
            self.watcher = Watcher(
                self.pipeline,
                state,
                PathFilter(self.root, self.ignore, self.exclude),
                Timing.of(self.watch, polling=self.polling),
                hooks=Hooks(
                    self.api.applied,
                    self.metrics.error,
                    self._maintain,
                    self._room,
                    step=self._model_steps(),
                ),
                lock=self.lock,
                guard=self.guard,
                quarantine=self.quarantine,
            )
            # Watch before the worker starts: events during start-up wait in the queue. Started
            # first, the observer starts each watch as it is scheduled: a root that cannot be
            # watched fails its watch alone (a stopped observer's start would fail as a whole).
            observer.start()
            self._watch_root(observer)
            self.root_monitor.start()
            try:
                self.watcher.enqueue([self.root])  # changes made while stopped (by stat)
                self.watcher.start()
                self.metrics.ready = True
                log.info(
                    "watching %s (%s observer, debounce %.1f s, %s)",
                    self.root,
                    "polling" if self.polling else "native",
                    self.watch.debounce_seconds,
                    "files stable across two polls"
                    if self.polling
                    else f"{min(self.watch.close_grace_seconds, self.watch.debounce_seconds):.1f} s "
                    "after a closed write",
                )
                while not stop.wait(min(1.0, self.access_check_interval or 1.0)):
                    self._check_access()
                    self._fill_access_map(stop)
                    if not observer.is_alive():
                        log.error("the file observer stopped; exiting so a supervisor restarts it")
                        break
                    if self.root_monitor.poll():
                        self._watch_again(observer)
            finally:
                log.info("stopping: finishing the batch in hand")
                self.root_monitor.stop()
                observer.stop()
                observer.join()
                if self._access_thread is not None:  # a pass in hand ends (a hung one is left)
                    self._access_thread.join(timeout=ACCESS_STOP_WAIT)
                self.watcher.stop()
        finally:
            self.stop_http()
        log.info("stopped")

    def _model_steps(self) -> Callable[[TreeState], bool] | None:
        """The watcher's steps of a change of embedding model copied between updates (see
        :meth:`~ingestor.tree.model_change.ModelChange.step`), or None when none runs."""
        from ingestor.tree.model_change import ModelChange

        change = self.pipeline.context.model_change
        if not isinstance(change, ModelChange) or not change.copying:
            return None

        def step(state: TreeState) -> bool:
            if change.step(state):
                return True
            switched = load_state(change.models, change.tree, layers=False)
            if switched is not None:  # /status and /metrics: the new model's tree
                self.metrics.snapshot(switched)
            return False

        return step

    def _watch_root(self, observer: Any) -> None:
        """Watch the root; a root missing at start (a share not mounted yet after a reboot) is
        watched once the root monitor sees it back (:meth:`_watch_again`), the tree answered
        meanwhile."""
        assert self.watcher is not None
        try:
            observer.schedule(self.watcher.handler, str(self.root), recursive=True)
        except OSError as exc:  # the monitor reports it; its return schedules the watch
            log.warning(
                "cannot watch %s yet (%s): the tree is kept and queries are answered; it is "
                "watched and rescanned once it is back",
                self.root,
                exc.strerror or exc,
            )

    def _watch_again(self, observer: Any) -> None:
        """The root came back (or is another directory): watch it afresh and rescan it."""
        assert self.watcher is not None
        self.guard.resume()
        observer.unschedule_all()
        self._watch_root(observer)  # gone again: the monitor reports it, its return retries
        self.watcher.enqueue([self.root])

    def _reconcile(self, stop: threading.Event, progress: Progress) -> Any:
        """First run: build (cancellable). Else repair the store; file changes go to the worker."""
        t0 = time.perf_counter()
        with self.lock:
            change = self.pipeline.context.model_change
            if getattr(change, "due", lambda: False)():
                # The tree's embedding model changes (tree.model_change) as the state is opened:
                # the old model's tree answers queries meanwhile, as the store switches when done:
                # /status and /metrics show that tree's size (counts only, no layer's models).
                built = load_state(
                    self.pipeline.context.models, self.pipeline.context.tree, layers=False
                )
                if built is not None:
                    self.metrics.snapshot(built)
                self.metrics.ready = True
            found = self.pipeline.open_state(recover=True)
            if found is not None and _copies_in_steps(change):
                log.info(
                    "the change of embedding model copies the tree between updates; the "
                    "watcher starts now (updates embed with the tree's model until the switch)"
                )
            if found is not None:
                state = found
                if Path(state.root) != self.root:
                    self.pipeline.reconcile(self.root)  # raises: built over another folder
                deleted, restored = self.pipeline.reconcile_store(state)
                summary = (
                    f"store checked ({deleted} orphan points deleted, {restored} nodes "
                    "re-stored); changed files are applied by the worker"
                )
            else:
                if not self.root.is_dir():  # a tree kept over a share that is away starts
                    raise SourceUnavailableError(
                        f"the folder to watch, {self.root}, is not there (missing, or a share "
                        "not mounted) and no tree was built from it: nothing to build or answer; "
                        "mount or create it, or name the folder to watch"
                    )
                report = self.pipeline.reconcile(self.root, cancellable(progress, stop))
                state = self.pipeline.require_state()
                summary = report.summary()
            self.metrics.snapshot(state)
            if self.guard.unavailable(len(state.sources)) is None:
                self.guard.record()
        log.info(
            "reconciled %s with tree %r in %.1f s: %s",
            self.root,
            self.pipeline.context.tree,
            time.perf_counter() - t0,
            summary,
        )
        return state

    # -- HTTP ------------------------------------------------------------------------------------

    def start_http(self) -> None:
        """Start the HTTP server in a thread (no-op when ``http_port`` is -1).

        Raises:
            ConfigError: binding beyond loopback without a token, or the port is taken.
        """
        if self.http_port >= 0:
            self.server = start_server(
                self.app(),
                self.http_host,
                self.http_port,
                self.limits,
                self.http_token,
                lock=self.state_lock,
                collection=self.collection,
            )
            if self.owner_link is not None:
                host, port = self.server.address
                self.owner_link(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        if self.socket:
            self.unix_server = UnixHttpServer(self.app(), socket_path(self.state_dir), self.limits)
            self.unix_server.start()
            if self.state_lock is not None:
                self.state_lock.describe(socket=str(self.unix_server.path))
            log.info("serving adrap commands on %s (callers known by the kernel)", self.state_dir)

    def app(self) -> Starlette:
        """Return the ASGI app (:func:`~ingestor.service.daemon.app.daemon_app`)."""
        return daemon_app(
            self.api,
            self.store,
            tree=self.pipeline.context.tree,
            root=self.root,
            collection=self.collection,
            limits=self.limits,
            token=self.http_token,
            host=self.http_host,
            updates=self.api.dashboard_updates,
            callers=self.callers,
            regenerate_at=self.regenerate_at,
        )

    def _maintain(self) -> None:
        """Idle-time maintenance (the watcher's thread, so never during an update): build the
        embedded store's HNSW index once enough points wait outside it."""
        if self._room() is not None:
            return
        due = getattr(self.store.inner, "optimize_due", None)
        if due is not None and due():
            self.store.optimize()
        if self.watcher is not None:
            self.watcher.refresh(self.api.refresh_due)
            if self.watcher.repair(self.repair) is not None:  # one drifted subtree per idle time
                self.metrics.snapshot(self.watcher.state)

    def _disk(self) -> dict[str, Any]:
        """``/status``'s ``disk``: the embedded store's free space (writes wait below the
        reserve, ``ADRAP_MIN_FREE_MB``: see :mod:`retriever.room`); nothing with a server."""
        if not self.embedded:
            return {}
        free, files = free_bytes(self.state_dir), free_files(self.state_dir)
        short = self._room() is not None
        return {
            "disk": {
                "free_bytes": free,
                "free_files": files,
                "min_free_mb": self.min_free_mb,
                "writes_wait": short,
            }
        }

    def _room(self) -> str | None:
        """Why nothing may write the tree now (the embedded store's disk has less than
        ``ADRAP_MIN_FREE_MB`` free), or None: updates, permission passes and maintenance wait."""
        if not self.embedded:
            return None
        return room_problem(
            self.state_dir,
            self.min_free_mb * MIB,
            "apply updates",
            then="and they are applied then (queries are answered meanwhile)",
        )

    def _check_access(self) -> None:
        """Start a permission pass when one is due: every ``access_check_interval`` seconds,
        stretched so that passes take at most :data:`ACCESS_PASS_SHARE` of a core on a big share,
        and as soon as the last pass's length has gone by after an attribute event (a chmod seen
        by the observer). The pass runs on its own thread, one at a time, so that a share that
        hangs in it (``stat`` blocks) never blocks the main loop: it still sees the share hang,
        and stops. Not started while the share is missing or hung (its files keep their classes
        until it answers again); a pass that found the writer busy is tried the next round."""
        if self.watcher is None or not self.access_check_interval:
            return
        if self._access_thread is not None and self._access_thread.is_alive():
            return
        since = time.monotonic() - self._access_checked
        asked = self.watcher.handler.attributes.is_set() and since >= self._access_took
        if not (asked or since >= self._access_gap) or not self.root_monitor.status()["available"]:
            return
        if self._room() is not None:  # the updates' warning says so; the pass waits with them
            return
        self.watcher.handler.attributes.clear()
        self._access_thread = threading.Thread(
            target=self._access_pass, args=(asked,), name="adrap-permissions", daemon=True
        )
        self._access_thread.start()

    def _fill_access_map(self, stop: threading.Event) -> None:
        """Once a reader's query wanted the embedded store's access map (retriever.access_map)
        or a copy of their points (retriever.reader_copy), fill it on a thread of its own, a page
        a store call, beside queries and writes."""
        amap = getattr(getattr(self.store, "inner", self.store), "access_map", None)
        if amap is None or ((amap.complete or not amap.wanted) and not amap.copies.wanted):
            return
        if self._map_thread is not None and self._map_thread.is_alive():
            return

        def fill() -> None:
            try:
                while not stop.is_set() and not self.store.fill_access_page():
                    pass
            except Exception as exc:  # the engine failed: readers keep the engine's filter
                log.warning("cannot fill the access map now (%s); tried again in a moment", exc)

        self._map_thread = threading.Thread(target=fill, name="adrap-access-map", daemon=True)
        self._map_thread.start()

    def _access_pass(self, asked: bool) -> None:
        """One permission pass (:meth:`_check_access`); sets when the next is due."""
        watcher = self.watcher
        assert watcher is not None
        t0 = time.monotonic()
        if watcher.check_access() is None:  # no pass ran (the writer busy, or it failed)
            self._access_checked = t0  # the next scheduled pass, one gap on
            if asked:  # the event's pass: the next round
                watcher.handler.attributes.set()
            return
        self._access_checked = time.monotonic()
        self._access_took = self._access_checked - t0
        self._access_gap = max(self.access_check_interval, self._access_took / ACCESS_PASS_SHARE)

    @property
    def embedded(self) -> bool:
        """True if the store is the embedded one (served read-only to Qdrant clients)."""
        return is_embedded(self.store)

    def stop_http(self) -> None:
        """Stop the HTTP servers and join their threads."""
        if self.server is not None:
            self.server.stop()
        if self.unix_server is not None:
            self.unix_server.stop()


def _copies_in_steps(change: object) -> bool:
    """Start a change of embedding model that copies in steps between updates (the writer can
    embed with the tree's model meanwhile); return whether one runs."""
    from ingestor.tree.model_change import ModelChange

    return isinstance(change, ModelChange) and change.stepwise and change.begin()
