"""Floor rules (issue 34): a summary whose children changed a little keeps its text, within
tolerance; changes add up; a removed leaf's text never survives in a summary."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from ingestor.tree.adrap import TreeUpdater
from ingestor.tree.invariants import violations
from ingestor.tree.state import TreeState
from ingestor.tree.tolerance import posterior
from testkit.corpus import TOPICS, doc_text
from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_deferral import current
from tests.unit.tree.trees import add_leaves, drop_sources, make_builder, new_state, real_clusterer


class ConcatSummarizer(EchoSummarizer):
    """Keeps every word of its texts: a summary shows all the text under it."""

    id = "concat"

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        self.calls += len(groups)
        return [" ".join(texts) for texts in groups]


def built(
    min_change: float = 0.0,
    soft_margin: float = 0.0,
    seed: int = 5,
    n: int = 60,
    summarizer: EchoSummarizer | None = None,
) -> tuple[TreeState, TreeUpdater, EchoSummarizer]:
    rng = random.Random(seed)
    state, _ = new_state([doc_text(rng, 3) for _ in range(n)])
    builder = make_builder(real_clusterer, min_top_nodes=4)
    if summarizer is not None:
        builder.summaries.summarizer = summarizer
    builder.build(state)
    builder.summaries.params = dataclasses.replace(
        builder.summaries.params, min_change=min_change, soft_margin=soft_margin
    )
    summarizer = builder.summaries.summarizer
    assert isinstance(summarizer, EchoSummarizer)
    return state, TreeUpdater(builder), summarizer


def summaries(state: TreeState) -> dict[str, tuple[str, list[str]]]:
    return {n.node_id: (n.text, list(n.children)) for n in state.nodes.values() if n.layer > 0}


def test_a_small_change_keeps_the_summary_text_with_current_children() -> None:
    """With ``min_change``, a summary whose children changed by less than that fraction of their
    tokens keeps its text (not stale) while its children and sources follow its cluster."""
    kept = []
    for min_change in (0.0, 0.5):
        state, updater, summarizer = built(min_change)
        before = summaries(state)
        calls = summarizer.calls
        new = add_leaves(state, [doc_text(random.Random(9), 3)], prefix="new")
        stats = updater.apply(state, new, [])
        assert violations(state, min_top_nodes=4) == []
        tolerated = [
            i
            for i, (text, children) in before.items()
            if i in state.nodes
            and state.nodes[i].text == text
            and state.nodes[i].children != children
        ]
        for i in tolerated:
            node = state.nodes[i]
            assert not node.stale, "within tolerance is not stale"
            assert i not in state.stale, "within tolerance is not stale"
            assert 0 < node.drift < 0.5 * sum(state.nodes[c].n_tokens for c in node.children)
            assert i in stats.upserted
        kept.append((len(tolerated), stats.summaries_tolerated, summarizer.calls - calls))
    (off, off_stat, off_calls), (on, on_stat, on_calls) = kept
    assert off == off_stat == 0, "without the rule every changed summary is regenerated"
    assert on == on_stat > 0
    assert on_calls < off_calls


def test_small_changes_add_up_until_the_summary_is_regenerated() -> None:
    """Ten small changes are not ten free ones: a layer-1 summary's children never drift from
    those its text was written from by ``min_change`` of their tokens or more."""
    min_change = 0.3
    state, updater, summarizer = built(min_change, seed=21)
    written = {i: set(c) for i, (_, c) in summaries(state).items()}
    rng = random.Random(17)
    regenerated = 0
    for step in range(12):
        text = f"{TOPICS[0]} {doc_text(rng, 5)}"  # each about a fifth of a cluster's tokens
        new = add_leaves(state, [text], prefix=f"c{step}_")
        stats = updater.apply(state, new, [])
        assert violations(state, min_top_nodes=4) == []
        regenerated += stats.summaries_regenerated
        fresh = set(summaries(state)) - set(current(state, summarizer))
        for node in state.nodes.values():
            if node.layer != 1:
                continue
            if node.node_id in fresh:  # its text is what its children make now
                written[node.node_id] = set(node.children)
                continue
            moved = written[node.node_id] ^ set(node.children)
            tokens = sum(state.nodes[c].n_tokens for c in node.children)
            drifted = sum(state.nodes[c].n_tokens for c in moved if c in state.nodes)
            assert drifted < min_change * tokens, (step, node.node_id, drifted, tokens)
    assert regenerated > 0


def test_a_removed_leaf_text_survives_in_no_summary() -> None:
    """Removals are never tolerated: with a tolerance that would keep any other change, the
    summaries that showed a removed leaf's words (and those above them) are regenerated."""
    state, updater, _ = built(summarizer=ConcatSummarizer())
    marker = "zanzibarquux"
    (leaf,) = add_leaves(state, [f"{marker} {TOPICS[0]} {doc_text(random.Random(3), 2)}"], "m")
    updater.apply(state, [leaf], [])
    showing = [n for n in state.nodes.values() if n.layer > 0 and marker in n.text]
    assert len({n.layer for n in showing}) >= 2, "the marker reached a summary of summaries"
    updater.builder.summaries.params = dataclasses.replace(
        updater.builder.summaries.params, min_change=0.99
    )
    drop_sources(state, [leaf])
    updater.apply(state, [], [leaf])
    assert violations(state, min_top_nodes=4) == []
    assert [n.node_id for n in state.nodes.values() if marker in n.text] == []


def test_a_marginal_soft_membership_changes_no_summary() -> None:
    """With ``soft_margin``, a node that joins or leaves a cluster only as a soft member near the
    threshold leaves that cluster's summary as it was; without it, the summary is regenerated."""
    margin = 0.4
    costs = []
    for soft_margin in (0.0, margin):
        state, updater, summarizer = built(soft_margin=soft_margin, seed=6)  # has one
        before = summaries(state)
        calls = summarizer.calls
        copies = [doc_text(random.Random(0), 3)] * 3  # one document copied into three files
        new = add_leaves(state, copies, prefix="soft")
        stats = updater.apply(state, new, [])
        assert violations(state, min_top_nodes=4) == []
        costs.append((stats.summaries_tolerated, summarizer.calls - calls))
        if not soft_margin:
            continue
        al = state.layers[0]
        for node_id, (text, children) in before.items():
            node = state.nodes.get(node_id)
            if node is None or node.layer != 1 or node.children == children:
                continue
            if node.text != text:
                continue
            (cid,) = {c for c in al.cluster_nodes if al.cluster_nodes[c] == [node_id]}
            for c in set(children) ^ set(node.children):
                p, hard = posterior(al, c, cid)
                assert not hard, (c, p, hard)
                assert abs(p - 0.1) <= margin, (c, p, hard)
    (off, off_calls), (on, on_calls) = costs
    assert off == 0
    assert on > 0, costs
    assert on_calls < off_calls, costs
