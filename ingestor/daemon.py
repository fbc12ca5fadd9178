"""The ``adrap watch`` daemon: reconcile, watch, and serve health, metrics, status and queries.

HTTP (stdlib ``ThreadingHTTPServer``, 127.0.0.1 by default):

- ``/healthz``: 200 while the process runs.
- ``/readyz``: 200 once start-up reconciliation is done, 503 before.
- ``/metrics``: Prometheus text format (written by hand, no client library).
- ``/status``: JSON: tree stats, pending events, the last update's summary and seconds.
- ``/query?q=...&mode=collapsed|traversal&max_tokens=N&top_k=N&source=...``: the same JSON as
  ``adrap query --json``, served from the daemon's own store (an embedded store is locked to the
  process that opened it, so this is how it is queried while the daemon owns it).

Every use of the store and embedder (worker batches and queries) happens under one lock.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ingestor.locking import StateLock
from ingestor.pipeline import Pipeline, UpdateReport
from ingestor.state import TreeState
from ingestor.tree import Progress, _noop
from ingestor.watcher import Watcher, make_observer
from retriever import RetrieverError, SearchFilter, answer_json, run_query

log = logging.getLogger(__name__)

#: Upper bounds (seconds) of the update latency histogram.
LATENCY_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Metrics:
    """Counters and the tree snapshot behind ``/metrics`` and ``/status`` (thread-safe)."""

    def __init__(self, tree: str) -> None:
        self.tree = tree
        self._lock = threading.Lock()
        self.ready = False
        self.files = 0
        self.layers: dict[int, int] = {}
        self.updates = 0
        self.files_changed = 0
        self.leaves_added = 0
        self.leaves_removed = 0
        self.summary_calls = 0
        self.summary_cache_hits = 0
        self.summary_tokens = 0
        self.rebuilds = 0
        self.errors: Counter[str] = Counter()
        self.buckets = [0] * len(LATENCY_BUCKETS)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.last: dict[str, Any] | None = None
        self.started = time.time()

    def snapshot(self, state: TreeState) -> None:
        """Record the tree's size (call while no batch is mutating ``state``)."""
        with self._lock:
            self.files = len(state.sources)
            self.layers = state.layer_counts()

    def applied(self, report: UpdateReport, state: TreeState) -> None:
        """Count one applied update and refresh the tree snapshot."""
        s = report.stats
        with self._lock:
            self.updates += 1
            self.files_changed += report.files_added + report.files_changed + report.files_removed
            self.leaves_added += s.leaves_added
            self.leaves_removed += s.leaves_removed
            self.summary_calls += s.summaries_regenerated
            self.summary_cache_hits += s.summary_cache_hits
            self.summary_tokens += s.summary_tokens
            self.rebuilds += report.rebuilt
            for i, bound in enumerate(LATENCY_BUCKETS):
                if report.seconds <= bound:
                    self.buckets[i] += 1
            self.latency_sum += report.seconds
            self.latency_count += 1
            self.last = {
                "summary": report.summary(),
                "seconds": round(report.seconds, 4),
                "at": time.time(),
                "files_added": report.files_added,
                "files_changed": report.files_changed,
                "files_removed": report.files_removed,
                "leaves_added": s.leaves_added,
                "leaves_removed": s.leaves_removed,
                "summaries_regenerated": s.summaries_regenerated,
                "summary_tokens": s.summary_tokens,
            }
        self.snapshot(state)

    def error(self, kind: str) -> None:
        """Count one failed update by the exception's class name."""
        with self._lock:
            self.errors[kind] += 1

    def prometheus(self, pending: int) -> str:
        """Return the metrics in the Prometheus text exposition format."""
        t = _label(self.tree)
        out: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            out.append(f"# HELP adrap_{name} {help_}")
            out.append(f"# TYPE adrap_{name} {kind}")
            out.extend(f"adrap_{name}{labels} {_num(v)}" for labels, v in samples)

        with self._lock:
            tl = f'{{tree="{t}"}}'
            metric("ready", "gauge", "1 once start-up reconciliation is done.", [(tl, self.ready)])
            metric("files", "gauge", "Documents in the tree.", [(tl, self.files)])
            metric("leaves", "gauge", "Leaf chunks in the tree.", [(tl, self.layers.get(0, 0))])
            metric(
                "nodes",
                "gauge",
                "Nodes per layer (0 = leaves).",
                [(f'{{tree="{t}",layer="{k}"}}', v) for k, v in self.layers.items()],
            )
            metric("pending_events", "gauge", "Paths waiting to be applied.", [(tl, pending)])
            metric("updates_total", "counter", "Batches applied.", [(tl, self.updates)])
            metric(
                "files_changed_total",
                "counter",
                "Files added, changed or removed.",
                [(tl, self.files_changed)],
            )
            metric("leaves_added_total", "counter", "Leaves inserted.", [(tl, self.leaves_added)])
            metric(
                "leaves_removed_total", "counter", "Leaves deleted.", [(tl, self.leaves_removed)]
            )
            metric(
                "summary_calls_total",
                "counter",
                "Summaries regenerated.",
                [(tl, self.summary_calls)],
            )
            metric(
                "summary_tokens_total",
                "counter",
                "Tokens spent by the summariser (prompt + completion; 0 for extractive).",
                [(tl, self.summary_tokens)],
            )
            metric(
                "summary_cache_hits_total",
                "counter",
                "Summaries taken from the cache.",
                [(tl, self.summary_cache_hits)],
            )
            metric(
                "rebuilds_total",
                "counter",
                "Updates that ended in a full rebuild.",
                [(tl, self.rebuilds)],
            )
            metric(
                "errors_total",
                "counter",
                "Failed updates by kind.",
                [(f'{{tree="{t}",kind="{_label(k)}"}}', v) for k, v in sorted(self.errors.items())],
            )
            buckets: list[tuple[str, float]] = [
                (f'{{tree="{t}",le="{_num(b)}"}}', c)
                for b, c in zip(LATENCY_BUCKETS, self.buckets, strict=True)
            ]
            buckets.append((f'{{tree="{t}",le="+Inf"}}', self.latency_count))
            out.append("# HELP adrap_update_seconds Seconds per applied update.")
            out.append("# TYPE adrap_update_seconds histogram")
            out.extend(f"adrap_update_seconds_bucket{labels} {_num(v)}" for labels, v in buckets)
            out.append(f"adrap_update_seconds_sum{tl} {_num(self.latency_sum)}")
            out.append(f"adrap_update_seconds_count{tl} {self.latency_count}")
        return "\n".join(out) + "\n"

    def status(self, pending: int) -> dict[str, Any]:
        """Return the ``/status`` document."""
        with self._lock:
            return {
                "tree": self.tree,
                "ready": self.ready,
                "uptime_seconds": round(time.time() - self.started, 1),
                "documents": self.files,
                "leaves": self.layers.get(0, 0),
                "nodes_per_layer": {str(k): v for k, v in self.layers.items()},
                "pending_events": pending,
                "updates_applied": self.updates,
                "summary_calls": self.summary_calls,
                "summary_tokens": self.summary_tokens,
                "errors": dict(self.errors),
                "last_update": self.last,
            }


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(int(value))


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
        self.server = ThreadingHTTPServer((self.http_host, self.http_port), _handler_for(self))
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
            ValueError: a parameter is missing or invalid.
        """
        question = params.get("q", "").strip()
        if not question:
            raise ValueError("missing query parameter q (the question)")
        mode = params.get("mode") or self.query_defaults[0]
        if mode not in ("collapsed", "traversal"):
            raise ValueError(f"mode must be collapsed or traversal, not {mode!r}")
        budget = int(params.get("max_tokens") or self.query_defaults[1])
        top_k = int(params.get("top_k") or self.query_defaults[2])
        if budget < 1 or top_k < 1:
            raise ValueError("max_tokens and top_k must be at least 1")
        lo, hi = params.get("min_layer"), params.get("max_layer")
        flt = SearchFilter(
            tree=self.pipeline.tree,
            min_layer=int(lo) if lo else None,
            max_layer=int(hi) if hi else None,
            source_prefix=params.get("source") or None,
        )
        t0 = time.perf_counter()
        with self.lock:
            vec = self.pipeline.embedder.embed_query(question)
            hits = run_query(
                self.pipeline.store, vec, flt, mode=mode, max_tokens=budget, top_k=top_k
            )
        return answer_json(
            question, mode, self.pipeline.tree, budget, hits, time.perf_counter() - t0
        )


def _handler_for(daemon: Daemon) -> type[BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[dict[str, str]], tuple[int, str, str]]] = {}

    def healthz(_: dict[str, str]) -> tuple[int, str, str]:
        return 200, "text/plain; charset=utf-8", "ok\n"

    def readyz(_: dict[str, str]) -> tuple[int, str, str]:
        if daemon.metrics.ready:
            return 200, "text/plain; charset=utf-8", "ready\n"
        return 503, "text/plain; charset=utf-8", "reconciling\n"

    def metrics(_: dict[str, str]) -> tuple[int, str, str]:
        body = daemon.metrics.prometheus(daemon.pending())
        return 200, "text/plain; version=0.0.4; charset=utf-8", body

    def status(_: dict[str, str]) -> tuple[int, str, str]:
        out = daemon.metrics.status(daemon.pending()) | {"root": str(daemon.root)}
        return 200, "application/json", json.dumps(out, ensure_ascii=False)

    def query(params: dict[str, str]) -> tuple[int, str, str]:
        if not daemon.metrics.ready:
            return 503, "application/json", json.dumps({"error": "reconciling; retry shortly"})
        try:
            out = daemon.query(params)
        except ValueError as exc:
            return 400, "application/json", json.dumps({"error": str(exc)})
        except RetrieverError as exc:
            return 503, "application/json", json.dumps({"error": str(exc)})
        return 200, "application/json", json.dumps(out, ensure_ascii=False)

    routes.update(
        {
            "/healthz": healthz,
            "/readyz": readyz,
            "/metrics": metrics,
            "/status": status,
            "/query": query,
        }
    )

    class Handler(BaseHTTPRequestHandler):
        server_version = "adrap"

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            route = routes.get(url.path)
            if route is None:
                code, ctype, body = (
                    404,
                    "text/plain; charset=utf-8",
                    f"not found; try {' '.join(routes)}\n",
                )
            else:
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                code, ctype, body = route(params)
            data = body.encode("utf-8")
            self.send_response(HTTPStatus(code))
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s " + format, self.address_string(), *args)

    return Handler
