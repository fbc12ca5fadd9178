"""Drift per subtree and its partial repair (issue 55): counted at every commit, repaired alone
within a token budget, committed as one update (a failure before the commit leaves the old tree)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from ingestor.pipeline import Pipeline
from ingestor.pipeline.repair import run_repairs
from ingestor.read.tokens import count_tokens
from ingestor.tree.drift import drift_record, drift_summary, group_drifts
from ingestor.tree.persist import load_state
from ingestor.tree.repair import RepairBudget, RepairParams, plan
from testkit.corpus import doc_text
from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, make_pipeline, write_corpus

ANY = RepairParams(threshold=0.2, tokens_per_hour=10**9, max_leaves=10**6)


class ReportingSummarizer(EchoSummarizer):
    """Reports its usage as an LLM server does: the prompt in a tokenizer that counts 1.1x
    cl100k, a 45-token template around it, and the summary's tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.prompt_tokens = self.completion_tokens = 0

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        out = super().summarize_many(groups, max_tokens=max_tokens, query=query)
        for texts, text in zip(groups, out, strict=True):
            self.prompt_tokens += round(1.1 * sum(map(count_tokens, texts))) + 45
            self.completion_tokens += count_tokens(text)
        return out


def drifted(
    tmp: Path, seed: int = 3, summarizer: EchoSummarizer | None = None
) -> tuple[Pipeline, Path]:
    """A built tree of 40 documents, then half of them replaced through adRAP."""
    rng = random.Random(seed)
    root = tmp / "docs"
    write_corpus(root, rng, 40)
    p = make_pipeline(tmp, summarizer or EchoSummarizer())
    p.build(root)
    changed = []
    for i in range(0, 40, 2):
        path = root / f"d{i}.txt"
        path.write_text(doc_text(rng, rng.randint(4, 10)))
        changed.append(path)
    p.update(changed)
    return p, root


def test_a_build_commits_every_subtree_at_drift_zero(tmp_path: Path) -> None:
    """Status right after a build (or a drift rebuild) lists the tree's subtrees, each at 0; it
    said ``subtrees: 0`` until the next update made the record."""
    root = tmp_path / "docs"
    write_corpus(root, random.Random(3), 40)
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.build(root)
    again = load_state(p.context.models, "t", readonly=True, layers=False)
    assert again is not None
    shown = drift_summary(again, 0.2)
    assert shown["subtrees"] == len(p.require_state().layers[0].gmms) > 1
    assert (shown["max"], shown["due"]) == (0.0, 0)
    p.context.store.close()


def test_each_subtree_counts_its_changed_leaves_and_the_count_is_committed(
    tmp_path: Path,
) -> None:
    p, _ = drifted(tmp_path)
    state = p.require_state()
    rec = drift_record(state, create=False)
    assert rec is not None, "the update must have counted its leaves per subtree"
    stats_changed = state.added_since_build + state.removed_since_build
    assert sum(rec["changed"]) == stats_changed
    assert sum(rec["size"]) == state.layer_counts()[0]
    assert group_drifts(state)[0].value > 0.2
    again = load_state(p.context.models, "t", readonly=True, layers=False)
    assert again is not None
    assert drift_record(again, create=False) == rec, "the record is in the committed state"
    shown = drift_summary(again, 0.2)
    assert shown["due"] >= 1
    assert shown["max"] == round(group_drifts(state)[0].value, 3)
    p.context.store.close()


def test_a_repair_reclusters_the_drifted_subtrees_and_keeps_the_tree_whole(
    tmp_path: Path,
) -> None:
    p, _ = drifted(tmp_path)
    state = p.require_state()
    leaves = set(state.ids_in_layer(0))
    generation = state.generation
    run = run_repairs(p.context, state, ANY, now=1000.0)
    assert run.done
    assert run.due == len(run.done)
    assert not run.waiting
    check_invariants(p)
    state = p.require_state()
    assert set(state.ids_in_layer(0)) == leaves, "a repair moves no leaf in or out"
    assert state.generation == generation + len(run.done), "one commit per repaired region"
    assert drift_summary(state, ANY.threshold)["due"] == 0, "repaired subtrees start again at 0"
    rec = drift_record(state)
    assert rec is not None
    assert rec["repairs"] == len(run.done)
    assert rec["repair_tokens"] == run.tokens > 0
    assert RepairBudget(state, 10**9).spent(1000.0) == run.tokens
    assert RepairBudget(state, 10**9).spent(1000.0 + 3601) == 0, "an hour later it refilled"
    assert run_repairs(p.context, state, ANY, now=1001.0).due == 0, "nothing is due any more"
    # The repaired tree takes updates as any other.
    rng = random.Random(9)
    root = tmp_path / "docs"
    (root / "late.txt").write_text(doc_text(rng, 8))
    p.update([root / "late.txt"])
    check_invariants(p)
    p.context.store.close()


@pytest.mark.parametrize(
    ("summarizer", "most"),
    [(EchoSummarizer, 1.1), (ReportingSummarizer, 1.3)],
    ids=["no usage", "usage"],
)
def test_a_repairs_estimate_covers_what_it_is_charged_and_no_more_than_it_needs(
    tmp_path: Path, summarizer: type[EchoSummarizer], most: float
) -> None:
    """The estimate decides whether a repair fits the hour: under its charge, repairs overspend
    the budget; far over it, repairs that would fit wait. It counted every layer-1 prompt twice
    (1.75x the charge of a summariser that reports no usage) and no LLM's template."""
    p, _ = drifted(tmp_path, summarizer=summarizer())
    run = run_repairs(p.context, p.require_state(), ANY, now=1000.0)
    assert run.done
    for done in run.done:
        assert done.tokens <= done.estimate <= most * done.tokens, (done.estimate, done.tokens)
    p.context.store.close()


class GrowingSummarizer(EchoSummarizer):
    """Writes two words of each text until ``long`` is set, then as many as fit ``max_tokens``
    (cl100k): a summary written again comes out longer than the one it replaces."""

    long = False

    def summary_of(self, texts: Sequence[str], max_tokens: int) -> str:
        words = " ".join(" ".join(t.split()[: 40 if self.long else 2]) for t in texts).split()
        while count_tokens(" ".join(words)) > max_tokens:
            words = words[: len(words) * 9 // 10]
        return " ".join(words)


def test_a_repairs_estimate_counts_the_longer_summaries_its_ancestors_will_read(
    tmp_path: Path,
) -> None:
    """An ancestor's prompt reads its children's new summaries: the estimate counted their old
    lengths, so a repair whose summaries came out longer spent past it (and past the hour's
    budget when it was the last that fitted)."""
    llm = GrowingSummarizer()
    p, _ = drifted(tmp_path, summarizer=llm)
    llm.long = True
    run = run_repairs(p.context, p.require_state(), ANY, now=1000.0)
    assert run.done
    for done in run.done:
        assert done.tokens <= done.estimate, (done.estimate, done.tokens)
    p.context.store.close()


def test_a_repair_past_the_hour_budget_waits_and_changes_nothing(tmp_path: Path) -> None:
    p, _ = drifted(tmp_path)
    state = p.require_state()
    generation, nodes = state.generation, set(state.nodes)
    tight = RepairParams(threshold=0.2, tokens_per_hour=10, max_leaves=10**6)
    run = run_repairs(p.context, state, tight, now=50.0)
    assert not run.done
    assert run.waiting == run.due >= 1
    assert state.generation == generation
    assert set(state.nodes) == nodes
    off = RepairParams(threshold=0.2, tokens_per_hour=0)
    assert run_repairs(p.context, state, off).due == 0, "0 tokens an hour: repairs are off"
    # Spent tokens count against the hour: a budget that fits one repair does not fit two.
    first = run_repairs(p.context, state, ANY, now=100.0, limit=1)
    assert len(first.done) == 1
    spent = first.tokens
    budget = RepairBudget(p.require_state(), spent + 1)
    assert budget.left(200.0) == 1
    p.context.store.close()


def test_a_repair_that_fails_before_its_commit_leaves_the_old_subtree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Points upserted, then the writer dies before the state commit: the next writer finds the
    intent and puts the committed (old) tree back in the store; nothing is lost."""
    p, _ = drifted(tmp_path)
    state = p.require_state()
    before = {i: (n.text, n.children) for i, n in state.nodes.items()}
    generation = state.generation

    def killed(*_: object, **__: object) -> None:
        raise KeyboardInterrupt("killed before the commit")

    monkeypatch.setattr(p.context, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        run_repairs(p.context, state, ANY, now=10.0)
    p.context.store.close()
    monkeypatch.undo()
    again = make_pipeline(tmp_path, EchoSummarizer())
    state = again.require_state(recover=True)
    assert state.generation == generation
    assert {i: (n.text, n.children) for i, n in state.nodes.items()} == before
    check_invariants(again)
    run = run_repairs(again.context, state, ANY, now=20.0)
    assert run.done, "the repair runs again from the committed tree"
    check_invariants(again)
    again.context.store.close()


def test_status_and_metrics_show_the_drift_per_subtree(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    from ingestor.service.metrics import Metrics

    p, _ = drifted(tmp_path)
    state = p.require_state()
    m = Metrics("t")
    m.repair_drift = 0.2
    assert m.status(0)["drift"]["subtrees"] == 0, "nothing known before the first snapshot"
    m.snapshot(state)
    shown = m.status(0)["drift"]
    assert shown == drift_summary(state, 0.2)
    assert shown["due"] >= 1
    text = generate_latest(m.registry(lambda: 0, dict)).decode()
    assert f'adrap_subtree_drift_max{{tree="t"}} {shown["max"]}' in text
    assert f'adrap_subtrees_drifted{{tree="t"}} {float(shown["due"])}' in text
    run_repairs(p.context, state, ANY, now=5.0)
    m.snapshot(state)
    text = generate_latest(m.registry(lambda: 0, dict)).decode()
    assert 'adrap_subtrees_drifted{tree="t"} 0.0' in text
    assert f'adrap_repairs_total{{tree="t"}} {float(m.drift["repairs"])}' in text
    assert m.drift["repairs"] >= 1
    p.context.store.close()


def test_a_subtree_whose_leaves_were_all_removed_is_not_due(tmp_path: Path) -> None:
    """Its drift stays past the threshold (its changes counted, its base kept), but a repair has
    nothing to re-cluster there: status must not say a repair is due that never comes."""
    p, _ = drifted(tmp_path)
    state = p.require_state()
    before = drift_summary(state, ANY.threshold)["due"]
    top = group_drifts(state)[0]
    assert top.value > ANY.threshold
    rec = drift_record(state)
    assert rec is not None
    rec["size"][top.group] = 0  # every leaf of that subtree removed
    assert group_drifts(state)[0].group == top.group, "still the most drifted"
    assert drift_summary(state, ANY.threshold)["due"] == before - 1
    assert all(top.group not in region for region in plan(state, ANY))
    p.context.store.close()
