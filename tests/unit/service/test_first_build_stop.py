"""The daemon's first build with a slow summariser: SIGTERM stops it between summary batches
(seconds, not the whole layer), and the next start pays only for the summaries not yet paid.

The summariser is slow on a clock of the test's: the batches are sized from the time they took
(:data:`~ingestor.tree.summary_calls.SUMMARY_BATCH_SECONDS`), read from that clock; nothing sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

import ingestor.tree.summaries as tree_summaries
import ingestor.tree.summary_calls as tree_build
from ingestor.pipeline import load_state
from testkit.daemons import make_daemon
from testkit.fakes import EchoSummarizer
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline, write_corpus

SECONDS_PER_SUMMARY = 0.1


class SlowSummarizer(EchoSummarizer):
    """An echo summariser as slow as a small LLM on ``clock``; sets ``stop`` once it has made
    ``stop_at`` summaries, and counts the batches asked for after that."""

    def __init__(
        self, clock: SimpleNamespace, stop: threading.Event | None = None, stop_at: int = 0
    ) -> None:
        super().__init__()
        self.clock = clock
        self.stop = stop
        self.stop_at = stop_at
        self.batch_sizes: list[int] = []
        self.batches_after_stop = 0
        self.seen: list[str] = []

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        if self.stop is not None and self.stop.is_set():
            self.batches_after_stop += 1
        self.batch_sizes.append(len(groups))
        out = []
        for g in groups:
            self.clock.now += SECONDS_PER_SUMMARY
            out += super().summarize_many([g], max_tokens=max_tokens, query=query)
            self.seen.append("\n".join(g))
            if self.stop is not None and self.calls == self.stop_at:
                self.stop.set()  # SIGTERM arrives in the middle of a batch
        return out


def summary_clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Time as the summary batching reads it, advanced only by the slow summariser."""
    clock = SimpleNamespace(now=0.0, time=time.time)
    clock.perf_counter = lambda: clock.now
    monkeypatch.setattr(tree_summaries, "time", clock)
    return clock


def test_sigterm_during_the_summaries_of_a_first_build_stops_it_within_a_batch_and_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree_build, "SUMMARY_BATCH_SECONDS", 0.3)  # a small LLM's 5 s, scaled
    root = tmp_path / "docs"
    write_corpus(root, 24)
    stop = threading.Event()
    clock = summary_clock(monkeypatch)
    first = SlowSummarizer(clock, stop, stop_at=2)
    p = make_pipeline(tmp_path, first)
    make_daemon(p, root).run(stop)
    assert stop.is_set()
    assert first.batch_sizes[1] > 1, "SIGTERM came in the middle of a batch"
    assert first.batches_after_stop == 0, f"went on after SIGTERM: batches {first.batch_sizes}"
    assert load_state(p.context.models, "t", p.context.embedder) is None, "nothing committed"

    p.context.builder.summaries.summarizer = second = SlowSummarizer(clock)
    stop = threading.Event()
    d = make_daemon(p, root)
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.metrics.ready or not t.is_alive(), timeout=120)
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
    state = load_state(p.context.models, "t", p.context.embedder)
    assert state is not None
    assert set(second.seen).isdisjoint(first.seen), "no summary was paid for twice"
    assert first.calls + second.calls == len(state.summary_cache)
