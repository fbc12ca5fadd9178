"""The daemon's first build with a slow summariser: SIGTERM stops it between summary batches
(seconds, not the whole layer), and the next start pays only for the summaries not yet paid."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import ingestor.tree.summaries as tree_build
from ingestor.pipeline import load_state
from ingestor.service.daemon import Daemon
from tests.fakes import EchoSummarizer
from tests.unit.service.test_watcher import make_pipeline, wait_for, write_corpus

SECONDS_PER_SUMMARY = 0.1


class SlowSummarizer(EchoSummarizer):
    """An echo summariser as slow as a small LLM; sets ``stop`` once it has made ``stop_at``."""

    def __init__(self, stop: threading.Event | None = None, stop_at: int = 0) -> None:
        super().__init__()
        self.stop = stop
        self.stop_at = stop_at
        self.stopped_at: float | None = None
        self.seen: list[str] = []

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        out = []
        for g in groups:
            time.sleep(SECONDS_PER_SUMMARY)
            out += super().summarize_many([g], max_tokens=max_tokens, query=query)
            self.seen.append("\n".join(g))
            if self.stop is not None and self.calls == self.stop_at:
                self.stopped_at = time.monotonic()
                self.stop.set()  # SIGTERM arrives in the middle of a batch
        return out


def test_sigterm_during_the_summaries_of_a_first_build_stops_it_within_a_batch_and_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree_build, "SUMMARY_BATCH_SECONDS", 0.3)  # a small LLM's 5 s, scaled
    root = tmp_path / "docs"
    write_corpus(root, 24)
    stop = threading.Event()
    first = SlowSummarizer(stop, stop_at=2)
    p = make_pipeline(tmp_path, first)
    Daemon(p, root).run(stop)
    assert first.stopped_at is not None
    took = time.monotonic() - first.stopped_at
    assert took < 1.0, f"stopped {took:.1f} s after SIGTERM: more than one batch"
    assert load_state(p.models, "t", p.embedder) is None, "nothing committed"

    p.builder.summarizer = second = SlowSummarizer()
    stop = threading.Event()
    d = Daemon(p, root)
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_for(lambda: d.metrics.ready or not t.is_alive(), timeout=120)
    finally:
        stop.set()
        t.join(60)
        p.store.close()
    state = load_state(p.models, "t", p.embedder)
    assert state is not None
    assert set(second.seen).isdisjoint(first.seen), "no summary was paid for twice"
    assert first.calls + second.calls == len(state.summary_cache)
