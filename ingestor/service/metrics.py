"""The daemon's counters and tree snapshot behind ``/metrics`` (Prometheus, through
``prometheus-client`` with a registry of the daemon's own) and ``/status``; a change of embedding
model under way is read from the state database's committed rows at each of them."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

from ingestor.pipeline import UpdateReport
from ingestor.service.summary_schedule import oldest_stale
from ingestor.tree.drift import drift_summary
from ingestor.tree.model_progress import ChangeProgress
from ingestor.tree.state import TreeState

#: Upper bounds (seconds) of the update latency histogram.
LATENCY_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Applied updates remembered for the dashboard (most recent last).
HISTORY = 20


def _no_change() -> ChangeProgress | None:
    return None


class Metrics:
    """Counters and the tree snapshot behind ``/metrics`` and ``/status`` (thread-safe).

    Args:
        tree: the tree's name.
        model_change: returns the change of embedding model under way, as committed
            (:func:`~ingestor.tree.model_progress.change_in`), or None.
    """

    def __init__(
        self, tree: str, model_change: Callable[[], ChangeProgress | None] = _no_change
    ) -> None:
        self.tree = tree
        self.model_change = model_change
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
        self.summary_input_tokens = 0
        self.summaries_deferred = 0
        self.summaries_tolerated = 0
        self.last_summary_input_tokens = 0
        self.refreshes = 0
        self.stale_summaries = 0
        self.oldest_stale: float | None = None  # its stamp (summary_schedule.oldest_stale)
        self.rebuilds = 0
        #: ``ADRAP_ADRAP__REPAIR_DRIFT``; the tree's drift per subtree (tree.drift), as last seen
        self.repair_drift = 0.5
        self.drift: dict[str, Any] = drift_summary(None, self.repair_drift)
        self.errors: Counter[str] = Counter()
        self.buckets = [0] * len(LATENCY_BUCKETS)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.last: dict[str, Any] | None = None
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.started = time.time()

    def snapshot(self, state: TreeState) -> None:
        """Record the tree's size (call while no batch is mutating ``state``)."""
        with self._lock:
            self.files = len(state.sources)
            self.layers = state.layer_counts()
            self.stale_summaries = len(state.stale)
            self.oldest_stale = oldest_stale(state)
            self.drift = drift_summary(state, self.repair_drift)

    def applied(self, report: UpdateReport, state: TreeState) -> None:
        """Count one applied update and refresh the tree snapshot."""
        s = report.stats
        with self._lock:
            self.summary_input_tokens += s.summary_input_tokens
            self.summaries_deferred += s.summaries_deferred
            self.summaries_tolerated += s.summaries_tolerated
            self.last_summary_input_tokens = s.summary_input_tokens
            self.summary_calls += s.summaries_regenerated
            self.summary_cache_hits += s.summary_cache_hits
            self.summary_tokens += s.summary_tokens
            self.stale_summaries = len(state.stale)
            self.oldest_stale = oldest_stale(state)
            if report.refresh:
                self.refreshes += 1
                self.layers = state.layer_counts()
                return
            self.updates += 1
            self.files_changed += (
                report.files_added
                + report.files_changed
                + report.files_removed
                + report.files_moved
            )
            self.leaves_added += s.leaves_added
            self.leaves_removed += s.leaves_removed
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
                "started_at": report.started_at,
                "files_added": report.files_added,
                "files_changed": report.files_changed,
                "files_removed": report.files_removed,
                "files_moved": report.files_moved,
                "leaves_added": s.leaves_added,
                "leaves_removed": s.leaves_removed,
                "clusters_changed": s.clusters_changed,
                "clusters_created": s.clusters_created,
                "clusters_split": s.clusters_split,
                "clusters_removed": s.clusters_removed,
                "layers_added": s.layers_added,
                "layers_dropped": s.layers_dropped,
                "summaries_regenerated": s.summaries_regenerated,
                "summary_cache_hits": s.summary_cache_hits,
                "summary_tokens": s.summary_tokens,
                "summaries_deferred": s.summaries_deferred,
                "summaries_tolerated": s.summaries_tolerated,
                "rebuilt": report.rebuilt,
            }
            self.history.append(self.last)
        self.snapshot(state)

    def recent(self) -> list[dict[str, Any]]:
        """Return the last :data:`HISTORY` applied updates, most recent first."""
        with self._lock:
            return list(reversed(self.history))

    def error(self, kind: str) -> None:
        """Count one failed update by the exception's class name."""
        with self._lock:
            self.errors[kind] += 1

    def registry(self, pending: Callable[[], int], extra: Callable[[], dict[str, Any]]) -> Any:
        """Return a ``CollectorRegistry`` of this daemon's own (no global state) for ``/metrics``.

        Args:
            pending: returns the number of paths waiting.
            extra: returns ``{"quarantined": n, "unread": {"skipped": n, "stale": m},
                "deletions_paused": bool, "watched_folder_missing": bool}``, and the embedded
                store's ``"disk_free_bytes"``.
        """
        from prometheus_client import CollectorRegistry

        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Collector(self, pending, extra))
        return reg

    def stale(self) -> tuple[int, float | None]:
        """The stale summaries and the oldest one's stamp, as the writer last recorded them (an
        HTTP thread never reads the writer's state)."""
        with self._lock:
            return self.stale_summaries, self.oldest_stale

    def status(self, pending: int) -> dict[str, Any]:
        """Return the ``/status`` document."""
        change = self.model_change()  # the state database's rows: outside the lock
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
                "summary_input_tokens": self.summary_input_tokens,
                "summaries_deferred": self.summaries_deferred,
                "summaries_tolerated": self.summaries_tolerated,
                "summary_refreshes": self.refreshes,
                "stale_summaries": self.stale_summaries,
                "drift": self.drift,
                "model_change": None if change is None else change.to_json(),
                "errors": dict(self.errors),
                "last_update": self.last,
            }


class _Collector:
    """Yields the daemon's metrics from a consistent snapshot at each scrape."""

    def __init__(
        self,
        metrics: Metrics,
        pending: Callable[[], int],
        extra: Callable[[], dict[str, Any]],
    ) -> None:
        self.m = metrics
        self.pending = pending
        self.extra = extra

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        m = self.m
        t = [m.tree]
        pending = self.pending()
        extra = self.extra()
        change = m.model_change()

        def gauge(name: str, help_: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(f"adrap_{name}", help_, labels=["tree"])
            g.add_metric(t, value)
            return g

        def counter(name: str, help_: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(f"adrap_{name}", help_, labels=["tree"])
            c.add_metric(t, value)
            return c

        with m._lock:
            yield gauge("ready", "1 once start-up reconciliation is done.", float(m.ready))
            yield gauge("files", "Documents in the tree.", m.files)
            yield gauge("leaves", "Leaf chunks in the tree.", m.layers.get(0, 0))
            nodes = GaugeMetricFamily(
                "adrap_nodes", "Nodes per layer (0 = leaves).", labels=["tree", "layer"]
            )
            for k, v in m.layers.items():
                nodes.add_metric([m.tree, str(k)], v)
            yield nodes
            yield gauge("pending_events", "Paths waiting to be applied.", pending)
            yield gauge(
                "quarantined_files",
                "Files quarantined after a permanent failure (see /status).",
                extra.get("quarantined", 0),
            )
            unread = extra.get("unread", {})
            yield gauge(
                "skipped_files",
                "Files skipped: their content cannot be used (see /status; retried when changed).",
                unread.get("skipped", 0),
            )
            yield gauge(
                "stale_files",
                "Files or folders that exist but cannot be read now; what was read is kept.",
                unread.get("stale", 0),
            )
            yield gauge(
                "deletions_paused",
                "1 while deletions are paused (share missing or awaiting confirmation).",
                float(bool(extra.get("deletions_paused"))),
            )
            yield gauge(
                "watched_folder_missing",
                "1 while the watched folder is missing, empty, unreachable or not answering.",
                float(bool(extra.get("watched_folder_missing"))),
            )
            if "disk_free_bytes" in extra:  # the embedded store's disk
                yield gauge(
                    "disk_free_bytes",
                    "Bytes free on the embedded store's disk; below ADRAP_MIN_FREE_MB, updates wait.",
                    extra["disk_free_bytes"],
                )
            yield counter("updates", "Batches applied.", m.updates)
            yield counter("files_changed", "Files added, changed or removed.", m.files_changed)
            yield counter("leaves_added", "Leaves inserted.", m.leaves_added)
            yield counter("leaves_removed", "Leaves deleted.", m.leaves_removed)
            yield counter("summary_calls", "Summaries regenerated.", m.summary_calls)
            yield counter(
                "summary_tokens",
                "Tokens spent by the summariser (prompt + completion; 0 for extractive).",
                m.summary_tokens,
            )
            yield counter(
                "summary_cache_hits", "Summaries taken from the cache.", m.summary_cache_hits
            )
            yield counter(
                "summary_input_tokens",
                "Summariser input tokens (the children's texts of every summary paid for).",
                m.summary_input_tokens,
            )
            yield counter(
                "summaries_deferred",
                "Summaries marked stale instead of regenerated.",
                m.summaries_deferred,
            )
            yield counter(
                "summaries_tolerated",
                "Summaries kept as they are: their children changed less than "
                "ADRAP_SUMMARY__MIN_CHANGE (their text and vector kept, not stale).",
                m.summaries_tolerated,
            )
            yield counter("summary_refreshes", "Refreshes of stale summaries.", m.refreshes)
            yield gauge(
                "stale_summaries",
                "Summaries whose children changed, waiting for the next refresh (old text kept).",
                m.stale_summaries,
            )
            yield counter("rebuilds", "Updates that ended in a full rebuild.", m.rebuilds)
            yield gauge(
                "subtree_drift_max",
                "The largest drift of a subtree: the share of its leaves changed since it was fitted.",
                m.drift["max"],
            )
            yield gauge(
                "subtrees_drifted",
                "Subtrees past ADRAP_ADRAP__REPAIR_DRIFT, waiting for their partial repair.",
                m.drift["due"],
            )
            yield counter("repairs", "Partial repairs of drifted subtrees.", m.drift["repairs"])
            yield counter(
                "repair_tokens",
                "Summary tokens spent by partial repairs.",
                m.drift["repair_tokens"],
            )
            yield gauge(
                "model_change_nodes_done",
                "Nodes embedded with the new model by the change of embedding model under way "
                "(0: none).",
                0 if change is None else change.done,
            )
            yield gauge(
                "model_change_nodes_total",
                "Nodes the change of embedding model under way embeds again (0: none).",
                0 if change is None else change.plan.total,
            )
            yield gauge(
                "model_change_started_seconds",
                "Unix time the change of embedding model under way started (0: none).",
                0 if change is None else change.plan.started_at,
            )
            info = GaugeMetricFamily(
                "adrap_model_change",
                "1 while the tree changes embedding model, from one model to another, in a phase "
                "(copy, refit, switch); no sample when none.",
                labels=["tree", "from_model", "to_model", "phase"],
            )
            if change is not None:
                p = change.plan
                info.add_metric([m.tree, p.old, p.model, p.phase], 1.0)
            yield info
            errors = CounterMetricFamily(
                "adrap_errors", "Failed updates by kind.", labels=["tree", "kind"]
            )
            for kind, v in sorted(m.errors.items()):
                errors.add_metric([m.tree, kind], v)
            yield errors
            cumulative = []
            for bound, count in zip(LATENCY_BUCKETS, m.buckets, strict=True):
                cumulative.append((repr(float(bound)), float(count)))
            cumulative.append(("+Inf", float(m.latency_count)))
            hist = HistogramMetricFamily(
                "adrap_update_seconds", "Seconds per applied update.", labels=["tree"]
            )
            hist.add_metric(t, cumulative, m.latency_sum)
            yield hist
