"""Failed batches: classified, bisected, quarantined (persisted), and paid summaries kept."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from watchdog.events import FileCreatedEvent

from ingestor.errors import SummarizationError
from ingestor.service.failures import Quarantine, classify
from ingestor.tree.invariants import violations
from retriever import StoreError
from testkit.fakes import EchoSummarizer
from tests.unit.service.test_watcher import assert_agrees, retrying_watcher
from tests.unit.tree.test_adrap import doc_text


class _Status(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def _summary_error(status: int) -> SummarizationError:
    try:
        raise _Status(status)
    except _Status as cause:
        try:
            raise SummarizationError(f"endpoint returned {status}") from cause
        except SummarizationError as exc:
            return exc


def test_failures_are_classified_by_kind() -> None:
    assert classify(_summary_error(400)) == "permanent"  # context too long / content filter
    assert classify(_summary_error(422)) == "permanent"
    assert classify(_summary_error(429)) == "transient"
    assert classify(_summary_error(503)) == "transient"
    assert classify(_summary_error(401)) == "transient"  # a key to fix: retry, lose nothing
    assert classify(SummarizationError("connection refused")) == "transient"
    assert classify(StoreError("unreachable")) == "transient"
    assert classify(KeyError("shared summary")) == "unexpected"


class RejectingSummarizer(EchoSummarizer):
    """An LLM that answers 400 for any cluster containing the word POISON (a content filter)."""

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        if any("POISON" in t for g in groups for t in g):
            raise _summary_error(400)
        return super().summarize_many(groups, max_tokens=max_tokens, query=query)


def test_a_permanent_llm_rejection_quarantines_one_file_and_the_rest_lands(
    tmp_path: Path,
) -> None:
    """Issue 9 item 2: a 400 on one file used to stop indexing for good."""
    with retrying_watcher(tmp_path, RejectingSummarizer()) as (p, root, w, errors):
        w.quarantine = Quarantine(tmp_path / "state" / "quarantine.json")
        names = [f"n{i}.txt" for i in range(5)]
        for i, name in enumerate(names):
            text = doc_text(random.Random(70 + i), 6)
            if name == "n3.txt":
                text = "POISON. " + text
            (root / name).write_text(text)
            w.handler.dispatch(FileCreatedEvent(str(root / name)))
        for _ in range(12):
            batch = w.next_batch()
            if not batch:
                break
            w._guarded(batch)
            if w.pending() == 0:
                break
        assert w.pending() == 0
        committed = set(p.require_state().sources)
        assert set(names) - {"n3.txt"} <= committed
        assert "n3.txt" not in committed
        assert set(w.quarantine.items()) == {"n3.txt"}
        assert "permanent" in w.quarantine.items()["n3.txt"].reason
        # persisted: a restarted daemon still knows it
        assert set(Quarantine(tmp_path / "state" / "quarantine.json").items()) == {"n3.txt"}
        assert set(errors) == {"SummarizationError"}
        state = p.require_state()
        assert violations(state) == []
        assert set(p.context.store.iter_ids("t")) == set(state.nodes)


class CountingFlaky(EchoSummarizer):
    """Records every group summarised; fails (503) once, on its ``fail_at``-th call."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[tuple[str, ...]] = []
        self.n = 0
        self.fail_at = -1

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        self.n += 1
        if self.n == self.fail_at:
            raise _summary_error(503)
        self.groups.extend(tuple(g) for g in groups)
        return super().summarize_many(groups, max_tokens=max_tokens, query=query)


def test_a_retry_reuses_the_summaries_the_failed_attempt_paid_for(tmp_path: Path) -> None:
    """Issue 9 item 3: the retry makes no LLM call for a cluster summarised by the failed attempt."""
    llm = CountingFlaky()
    # drift 0: a drift rebuild, one summariser call per layer
    with retrying_watcher(tmp_path, llm, drift_threshold=0.0) as (p, root, w, errors):
        rng = random.Random(5)
        for i in range(12):
            (root / f"m{i}.txt").write_text(doc_text(rng, 8))
            w.handler.dispatch(FileCreatedEvent(str(root / f"m{i}.txt")))
        llm.groups.clear()
        llm.n, llm.fail_at = 0, 2  # the first layer's summaries are paid, then the LLM fails
        batch = w.next_batch()
        assert not w.apply(batch)
        assert errors == ["SummarizationError"]
        paid = list(llm.groups)
        assert paid, "the failed attempt summarised something before failing"
        assert w.apply(w.next_batch())
        again = llm.groups[len(paid) :]
        assert not set(paid) & set(again), "a paid summary was bought again"
        assert_agrees(p, root, w.state)
