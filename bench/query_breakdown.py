"""Where each daemon ``/query``'s time goes, for bench/watch.py (instrumentation, not product code)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Mapping
from typing import Any

from ingestor.service.daemon import Daemon


class Breakdown:
    """Where each /query's time goes (bench instrumentation, not product code).

    Per query, in its own thread: wall and CPU (``time.thread_time``) of the whole query, of
    embedding the question, of the store calls, and the wait for the store's lock (which the
    writer also takes, one short call at a time).
    """

    def __init__(self, d: Daemon) -> None:
        self.rows: list[dict[str, float]] = []
        self._tl = threading.local()
        inner = object.__getattribute__(d.store, "_lock")
        tl = self._tl

        class TimedLock:
            def __enter__(self) -> None:
                t0 = time.perf_counter()
                inner.acquire()
                if getattr(tl, "row", None) is not None:
                    tl.row["lock_wait"] += time.perf_counter() - t0
                    tl.held_at = time.perf_counter()

            def __exit__(self, *exc: object) -> None:
                if getattr(tl, "row", None) is not None:
                    tl.row["store"] += time.perf_counter() - tl.held_at
                inner.release()

        object.__setattr__(d.store, "_lock", TimedLock())
        emb = d.queries.embedder
        real_embed = emb.embed_query

        def embed_query(text: str) -> Any:
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return real_embed(text)
            finally:
                if getattr(tl, "row", None) is not None:
                    tl.row["embed"] += time.perf_counter() - w0
                    tl.row["embed_cpu"] += time.thread_time() - c0

        emb.embed_query = embed_query  # type: ignore[method-assign]
        real_query = d.queries.query  # the route holds d.query, which calls this

        def query(params: Mapping[str, object]) -> dict[str, Any]:
            keys = ("embed", "embed_cpu", "lock_wait", "store")
            tl.row = dict.fromkeys(keys, 0.0)
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return real_query(params)
            finally:
                tl.row["wall"] = time.perf_counter() - w0
                tl.row["cpu"] = time.thread_time() - c0
                self.rows.append(tl.row)
                tl.row = None

        d.queries.query = query  # type: ignore[method-assign]

    def take(self) -> list[dict[str, float]]:
        rows, self.rows = self.rows, []
        return rows

    @staticmethod
    def line(label: str, rows: list[dict[str, float]]) -> str:
        def ms(key: str) -> str:
            return f"{statistics.median(r[key] for r in rows) * 1000:.1f}"

        return (
            f"  {label} medians (ms, in process): query wall {ms('wall')} / CPU {ms('cpu')}; "
            f"embed wall {ms('embed')} / CPU {ms('embed_cpu')}; store wait {ms('lock_wait')}, "
            f"store calls {ms('store')}"
        )
