"""A build's paid summaries survive a stop or a kill; readers never see a half-built tree.

Real pipeline: UMAP + GMM, a real qdrant-edge shard, the real state database; hashed
embeddings and a counting echo summariser that raises (a kill's stand-in) after N summaries.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import ingestor.tree.summary_calls as tree_build
from ingestor.cli import main
from ingestor.pipeline import Pipeline, load_state, state_exists
from ingestor.tree.persist import checkpoint_path, state_path
from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, make_pipeline, write_corpus


class Killed(Exception):
    """Stands for a kill -9 in the middle of a summary batch."""


class DyingSummarizer(EchoSummarizer):
    """Echo summaries, counted per group; the batch that would pass ``die_after`` raises."""

    def __init__(self, die_after: int | None = None, prompt_version: str = "1") -> None:
        super().__init__()
        self.die_after = die_after
        self.prompt_version = prompt_version
        self.seen: list[str] = []

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        if self.die_after is not None and self.calls + len(groups) > self.die_after:
            raise Killed(f"killed after {self.calls} summaries")
        self.seen.extend("\n".join(g) for g in groups)
        return super().summarize_many(groups, max_tokens=max_tokens, query=query)


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 3 summaries, so a build of a small corpus has several checkpoints."""
    monkeypatch.setattr(tree_build, "SUMMARY_BATCH_MAX", 3)


def pipeline(tmp: Path, summarizer: EchoSummarizer) -> Pipeline:
    return make_pipeline(tmp, summarizer)


def corpus(tmp: Path) -> Path:
    root = tmp / "docs"
    write_corpus(root, random.Random(0), 14)
    return root


def tree_of(p: Pipeline) -> dict[str, tuple[int, str, tuple[str, ...]]]:
    state = p.require_state()
    return {i: (n.layer, n.text, tuple(sorted(n.children))) for i, n in state.nodes.items()}


def reference(tmp: Path) -> tuple[int, dict[str, tuple[int, str, tuple[str, ...]]]]:
    """Build the corpus once, uninterrupted: (summaries it pays for, the tree)."""
    summarizer = DyingSummarizer()
    p = pipeline(tmp / "reference", summarizer)
    p.build(corpus(tmp / "reference"))
    return summarizer.calls, tree_of(p)


def status(tmp: Path) -> dict[str, object]:
    result = CliRunner().invoke(
        main, ["status", "--json"], env={"ADRAP_STATE_DIR": str(tmp), "ADRAP_TREE": "t"}
    )
    assert result.exit_code == 0, result.output
    out: dict[str, object] = json.loads(result.output)
    return out


@pytest.mark.usefixtures("small_batches")
def test_a_first_build_killed_after_some_summaries_pays_only_for_the_rest_when_run_again(
    tmp_path: Path,
) -> None:
    total, tree = reference(tmp_path)
    assert total > 9, "the corpus needs several summary batches"
    root = corpus(tmp_path)
    first = DyingSummarizer(die_after=7)
    p = pipeline(tmp_path, first)
    with pytest.raises(Killed):
        p.build(root)
    paid = first.calls
    assert paid >= 6, "the batches before the kill were paid for"

    # Readers in between: no tree, although the checkpoint holds the paid summaries.
    assert checkpoint_path(p.context.models, "t").exists()
    assert not state_path(p.context.models, "t").exists()
    assert not state_exists(p.context.models, "t")
    assert load_state(p.context.models, "t") is None
    assert p.open_state() is None
    assert status(tmp_path)["built"] is False

    second = DyingSummarizer()
    p.context.builder.summaries.summarizer = second
    embedded: list[str] = []
    embed = p.context.embedder.embed_documents

    def counting_embed(texts: Sequence[str]) -> Any:
        embedded.extend(texts)
        return embed(texts)

    p.context.embedder.embed_documents = counting_embed  # type: ignore[method-assign]
    report = p.build(root)
    assert second.calls == total - paid, "only the summaries the killed build had not paid for"
    leaves = {text for layer, text, _ in tree.values() if layer == 0}
    assert leaves.isdisjoint(embedded), "the leaves' vectors came from the checkpoint"
    assert set(second.seen).isdisjoint(first.seen)
    assert report.stats.cache_hits >= paid
    assert tree_of(p) == tree, "the resumed build makes the same tree (same clusters, same ids)"
    check_invariants(p)
    assert not checkpoint_path(p.context.models, "t").exists(), "the first commit imported it"
    cache = p.require_state().summary_cache
    assert len(cache) == total
    assert status(tmp_path)["built"] is True


@pytest.mark.usefixtures("small_batches")
def test_a_first_build_killed_twice_keeps_what_both_paid_for(tmp_path: Path) -> None:
    total, _ = reference(tmp_path)
    root = corpus(tmp_path)
    p = pipeline(tmp_path, first := DyingSummarizer(die_after=4))
    with pytest.raises(Killed):
        p.build(root)
    p.context.builder.summaries.summarizer = again = DyingSummarizer(die_after=4)
    with pytest.raises(Killed):
        p.build(root)
    assert again.calls > 0
    p.context.builder.summaries.summarizer = last = DyingSummarizer()
    p.build(root)
    assert last.calls == total - first.calls - again.calls


@pytest.mark.usefixtures("small_batches")
@pytest.mark.parametrize("how", ["rebuild", "build"])
def test_a_rebuild_killed_half_way_keeps_the_old_tree_and_its_paid_summaries(
    tmp_path: Path, how: str
) -> None:
    """`adrap rebuild` and a build over a committed tree store their summaries in its cache."""

    def rerun(p: Pipeline, root: Path) -> None:
        p.rebuild() if how == "rebuild" else p.build(root)

    ref = pipeline(tmp_path / "reference", DyingSummarizer())
    ref.build(corpus(tmp_path / "reference"))
    ref.context.builder.summaries.summarizer = whole = DyingSummarizer(prompt_version="2")
    rerun(ref, tmp_path / "reference" / "docs")  # uninterrupted: what the change of prompt costs

    root = corpus(tmp_path)
    p = pipeline(tmp_path, DyingSummarizer())
    p.build(root)
    old = tree_of(p)
    generation = p.require_state().generation
    # A new prompt version: every summary is paid for again.
    p.context.builder.summaries.summarizer = first = DyingSummarizer(
        die_after=7, prompt_version="2"
    )
    with pytest.raises(Killed):
        rerun(p, root)
    assert first.calls >= 6
    assert tree_of(p) == old, "readers still see the old tree"
    assert p.require_state().generation == generation
    assert not checkpoint_path(p.context.models, "t").exists(), (
        "a committed tree's own cache is used"
    )
    check_invariants(p)

    p.context.builder.summaries.summarizer = second = DyingSummarizer(prompt_version="2")
    rerun(p, root)
    assert second.calls == whole.calls - first.calls, "only what the killed run had not paid"
    assert tree_of(p) == tree_of(ref)
    check_invariants(p)


def test_summary_batches_last_about_the_target_in_whole_rounds_of_the_concurrency(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tree_build, "SUMMARY_BATCH_MAX", 64)
    monkeypatch.setattr(tree_build, "SUMMARY_BATCH_SECONDS", 5.0)
    assert tree_build.next_batch(4, 40.0, 4) == 4, "slow: one round, never fewer"
    assert tree_build.next_batch(4, 1.0, 4) == 20, "5 s at 4 a second"
    assert tree_build.next_batch(3, 2.0, 2) == 6, "7.5 wanted, in whole rounds of 2"
    assert tree_build.next_batch(64, 0.01, 1) == 64, "fast: the most"


def test_an_extractive_summariser_on_workers_is_given_a_round_of_clusters_for_each() -> None:
    """A mapped summariser's batch feeds every worker (16 workers: 512 clusters, not 64); an
    LLM's is a round of its requests; with one worker, nothing changes."""
    from ingestor.summarize.extractive import ExtractiveSummarizer

    extractive = ExtractiveSummarizer()
    assert tree_build.batch_floor(extractive, 16) == 16 * tree_build.MAPPED_GROUPS_PER_WORKER
    assert tree_build.next_batch(512, 0.5, 512) == 512
    assert tree_build.batch_floor(extractive, 1) == 1
    llm = EchoSummarizer()
    llm.concurrency = 4  # type: ignore[attr-defined]
    assert tree_build.batch_floor(llm, 16) == 4


def test_a_drift_rebuild_inside_an_update_keeps_what_it_paid_for(
    tmp_path: Path, small_batches: None
) -> None:
    """A drift-triggered rebuild (an update past the drift threshold) checkpoints its summaries in
    the state's cache: the retry of a failed one pays only for the rest."""
    root = corpus(tmp_path)
    s = DyingSummarizer()
    p = make_pipeline(tmp_path, s, drift=0.01)  # any update rebuilds the layers
    p.build(root)
    generation = p.require_state().generation
    (root / "new.txt").write_text("A new note about river boats. " * 30)
    s.die_after = s.calls + 7
    with pytest.raises(Killed):
        p.update([root / "new.txt"])
    assert p.require_state().generation == generation, "nothing committed: the old tree stays"
    s.die_after = None
    before = s.calls
    report = p.update([root / "new.txt"])
    assert report.rebuilt
    paid_again = set(s.seen[before:]) & set(s.seen[:before])
    assert not paid_again, "the retry asked again for summaries the failed rebuild paid for"
    check_invariants(p)
