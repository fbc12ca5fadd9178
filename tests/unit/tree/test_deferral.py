"""Deferred summaries (issue 34): an update with ``defer`` marks changed clusters' summaries stale
instead of regenerating them; a refresh buys each of them once, bottom-up."""

from __future__ import annotations

import random

from ingestor.tree.adrap import TreeUpdater
from ingestor.tree.invariants import violations
from ingestor.tree.state import TreeState
from ingestor.tree.summaries import cache_key
from testkit.corpus import TOPICS, doc_text
from testkit.fakes import EchoSummarizer
from tests.unit.tree.trees import add_leaves, drop_sources, make_builder, new_state, real_clusterer


def built(seed: int = 5, n: int = 60) -> tuple[TreeState, TreeUpdater, EchoSummarizer]:
    rng = random.Random(seed)
    state, _ = new_state([doc_text(rng, 3) for _ in range(n)])
    builder = make_builder(real_clusterer, min_top_nodes=4)
    builder.build(state)
    summarizer = builder.summaries.summarizer
    assert isinstance(summarizer, EchoSummarizer)
    return state, TreeUpdater(builder), summarizer


def current(state: TreeState, summarizer: EchoSummarizer) -> list[str]:
    """Summaries whose text is not the summary of their children now: the summary cache names a
    summary by its children's contents (in any order), so a current summary's text is the cache's
    entry for its children, and that entry is what the summariser made of them."""
    bad = []
    for node in state.nodes.values():
        if node.layer == 0:
            continue
        key = cache_key(summarizer, 40, [state.nodes[c].content_hash for c in node.children])
        if state.summary_cache.peek(key) != node.text:
            bad.append(node.node_id)
    return bad


def stale_nodes(state: TreeState) -> set[str]:
    return {n.node_id for n in state.nodes.values() if n.stale}


def test_a_deferred_update_marks_summaries_stale_and_keeps_the_tree_sound() -> None:
    state, updater, summarizer = built()
    before = {n.node_id: (n.text, n.children) for n in state.nodes.values() if n.layer > 0}
    calls = summarizer.calls
    rng = random.Random(9)
    new = add_leaves(state, [doc_text(rng, 3) for _ in range(3)], prefix="new")
    stats = updater.apply(state, new, [], defer=True)
    assert stats.summaries_deferred > 0
    stale = stale_nodes(state)
    assert stale
    assert set(state.stale) == stale
    for node_id in stale:
        node = state.nodes[node_id]
        assert node.text == before[node_id][0], "a stale summary keeps its text"
        assert node.children != before[node_id][1], "and gets its cluster's members"
        assert node_id in stats.upserted
    assert summarizer.calls - calls == stats.summaries_regenerated < len(stale) + calls
    assert violations(state, min_top_nodes=4) == []
    for leaf in new:
        assert state.nodes[leaf].parents, "a new leaf has its summary as parent"


def test_a_refresh_regenerates_every_stale_summary_once_and_leaves_none() -> None:
    state, updater, summarizer = built()
    rng = random.Random(13)
    for step in range(6):
        new = add_leaves(state, [doc_text(rng, 3)], prefix=f"s{step}_")
        updater.apply(state, new, [], defer=True)
        assert violations(state, min_top_nodes=4) == []
    assert stale_nodes(state)
    assert set(current(state, summarizer)) == stale_nodes(state), "stale: exactly the out of date"
    stats = updater.refresh(state)
    assert not stale_nodes(state)
    assert len(state.stale) == 0
    assert current(state, summarizer) == [], "every summary is current after the refresh"
    assert violations(state, min_top_nodes=4) == []
    assert stats.summaries_deferred == 0


def test_deferring_buys_fewer_summaries_than_regenerating_at_each_change() -> None:
    """The same ten changes (adds and removals of one document each) cost fewer summaries when
    coalesced into one refresh than when each regenerates at once, and end equally current."""
    costs = []
    for defer in (False, True):
        state, updater, summarizer = built(seed=21)
        start = summarizer.calls
        rng = random.Random(17)
        added: list[str] = []
        for step in range(10):
            if step % 3 == 2 and added:
                gone = [added.pop(0)]
                drop_sources(state, gone)
                updater.apply(state, [], gone, defer=defer)
            else:
                text = f"{rng.choice(TOPICS)} {doc_text(rng, 2)}"
                new = add_leaves(state, [text], prefix=f"c{step}_")
                added += new
                updater.apply(state, new, [], defer=defer)
        updater.refresh(state)
        assert current(state, summarizer) == []
        assert violations(state, min_top_nodes=4) == []
        costs.append(summarizer.calls - start)
    immediate, deferred = costs
    assert deferred < immediate, costs
