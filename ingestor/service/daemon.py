"""The ``adrap watch`` daemon: reconcile, watch, and serve health, metrics, status and queries.

HTTP (stdlib ``ThreadingHTTPServer``, 127.0.0.1 by default):

- ``/healthz``: 200 while the process runs.
- ``/readyz``: 200 once start-up reconciliation is done, 503 before.
- ``/metrics``: Prometheus text format (written by hand, no client library).
- ``/status``: JSON: tree stats, pending events, the last update's summary and seconds.
- ``/query?q=...&mode=collapsed|traversal|postqfrap&max_tokens=N&top_k=N&k0=N&base=...&source=...``:
  the same JSON as ``adrap query --json``, served from the daemon's own store (an embedded store
  is locked to the process that opened it, so this is how it is queried while the daemon owns it).
- ``/ask?q=...`` (same parameters): the JSON of ``adrap ask --json``.

Queries and answers run through :class:`~ingestor.answer.service.QueryService`, the CLI's code path.

Every use of the store and embedder (worker batches and queries) happens under one lock.
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ingestor.answer.service import QueryDefaults, QueryService
from ingestor.pipeline import Pipeline
from ingestor.service.http import handler_for
from ingestor.service.locking import StateLock
from ingestor.service.metrics import Metrics
from ingestor.service.watcher import Watcher, make_observer
from ingestor.tree.build import Progress, _noop

log = logging.getLogger(__name__)


class Daemon:
    """Owns the pipeline while ``adrap watch`` runs: reconciliation, observer, worker and HTTP.

    Args:
        pipeline: the pipeline (its store and embedder are used only under ``self.lock``).
        root: the watched folder.
        polling: use watchdog's polling observer (network shares, bind mounts).
        poll_interval: seconds between polls.
        debounce: quiet seconds that end a burst of events.
        max_backoff: cap of the retry delay after a failed batch.
        http_host: the HTTP address; ``http_port`` 0 picks a free port, -1 disables HTTP.
        http_port: see ``http_host``.
        ignore: glob patterns of ignored names.
        exclude: folders never indexed (the state dir when it is inside ``root``).
        state_lock: the held writer lock; the daemon writes its HTTP address into it.
        query_defaults: ``(mode, max_tokens, top_k)`` used when ``/query`` omits them.
        queries: answers ``/query`` and ``/ask`` (default: one over the pipeline's store with
            ``query_defaults`` and no LLM); its lock becomes the daemon's.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        root: Path,
        *,
        polling: bool = False,
        poll_interval: float = 2.0,
        debounce: float = 1.0,
        max_backoff: float = 60.0,
        http_host: str = "127.0.0.1",
        http_port: int = -1,
        ignore: list[str] | None = None,
        exclude: list[Path] | None = None,
        state_lock: StateLock | None = None,
        query_defaults: tuple[str, int, int] = ("collapsed", 2000, 5),
        queries: QueryService | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.root = root.resolve()
        self.polling = polling
        self.poll_interval = poll_interval
        self.debounce = debounce
        self.max_backoff = max_backoff
        self.http_host = http_host
        self.http_port = http_port
        self.ignore = ignore
        self.exclude = exclude or []
        self.state_lock = state_lock
        self.query_defaults = query_defaults
        self.lock = threading.Lock()
        mode, budget, top_k = query_defaults
        self.queries = queries or QueryService(
            pipeline.store,
            pipeline.embedder,
            pipeline.tree,
            defaults=QueryDefaults(mode=mode, max_tokens=budget, top_k=top_k),
        )
        self.queries.lock = self.lock  # one lock for the writer and every query
        self.metrics = Metrics(pipeline.tree)
        self.watcher: Watcher | None = None
        self.server: ThreadingHTTPServer | None = None
        self._server_thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound HTTP address, once serving."""
        if self.server is None:
            return None
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def pending(self) -> int:
        """Paths waiting to be applied."""
        return self.watcher.pending() if self.watcher else 0

    def run(self, stop: threading.Event, progress: Progress = _noop) -> None:
        """Serve HTTP, reconcile, then watch until ``stop`` is set; always stops every thread.

        Raises:
            IngestError, RetrieverError, ModelStoreError: reconciliation failed (nothing watched).
        """
        observer = make_observer(polling=self.polling, interval=self.poll_interval)
        self.start_http()
        try:
            t0 = time.perf_counter()
            with self.lock:
                report = self.pipeline.reconcile(self.root, progress)
                state = self.pipeline.require_state()
                self.metrics.snapshot(state)
            log.info(
                "reconciled %s with tree %r in %.1f s: %s",
                self.root,
                self.pipeline.tree,
                time.perf_counter() - t0,
                report.summary(),
            )
            kwargs: dict[str, Any] = {} if self.ignore is None else {"ignore": self.ignore}
            self.watcher = Watcher(
                self.pipeline,
                state,
                self.root,
                debounce=self.debounce,
                exclude=self.exclude,
                lock=self.lock,
                max_backoff=self.max_backoff,
                on_applied=self.metrics.applied,
                on_error=self.metrics.error,
                **kwargs,
            )
            # Watch before the worker starts: events during start-up wait in the queue.
            observer.schedule(self.watcher.handler, str(self.root), recursive=True)
            observer.start()
            try:
                self.watcher.start()
                self.metrics.ready = True
                log.info(
                    "watching %s (%s observer, debounce %.1f s)",
                    self.root,
                    "polling" if self.polling else "native",
                    self.debounce,
                )
                while not stop.wait(1.0):
                    if not observer.is_alive():
                        log.error("the file observer stopped; exiting so a supervisor restarts it")
                        break
            finally:
                log.info("stopping: finishing the batch in hand")
                observer.stop()
                observer.join()
                self.watcher.stop()
        finally:
            self.stop_http()
        log.info("stopped")

    # -- HTTP ------------------------------------------------------------------------------------

    def start_http(self) -> None:
        """Start the HTTP server in a thread (no-op when ``http_port`` is -1)."""
        if self.http_port < 0:
            return
        self.server = ThreadingHTTPServer((self.http_host, self.http_port), handler_for(self))
        self.server.daemon_threads = True
        self._server_thread = threading.Thread(
            target=self.server.serve_forever, name="adrap-http", kwargs={"poll_interval": 0.2}
        )
        self._server_thread.start()
        host, port = self.address or (self.http_host, self.http_port)
        if self.state_lock is not None:
            self.state_lock.describe(http=f"{host}:{port}")
        log.info("serving /healthz /readyz /metrics /status /query on http://%s:%d", host, port)

    def stop_http(self) -> None:
        """Stop the HTTP server and join its thread."""
        if self.server is None:
            return
        self.server.shutdown()
        self.server.server_close()
        if self._server_thread is not None:
            self._server_thread.join()

    def query(self, params: dict[str, str]) -> dict[str, Any]:
        """Answer ``/query``: the JSON of ``adrap query --json``.

        Raises:
            ValueError: a parameter is missing, invalid or out of bounds.
            SummarizationError: postQFRAP's summariser failed.
        """
        return self.queries.query(params)

    def ask(self, params: dict[str, str]) -> dict[str, Any]:
        """Answer ``/ask``: the JSON of ``adrap ask --json`` (same errors as :meth:`query`)."""
        return self.queries.ask(params)
