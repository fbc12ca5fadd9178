"""The daemon's counters and tree snapshot behind ``/metrics`` (Prometheus text) and ``/status``."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from ingestor.pipeline import UpdateReport
from ingestor.tree.state import TreeState

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
