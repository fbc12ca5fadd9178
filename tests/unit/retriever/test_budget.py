"""The token-budget fill is one rule (retriever.budget): checked once, then every caller against a
reference fill on the same hits, over random token sizes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qdrant_client import QdrantClient

from retriever import collapsed_tree, fill_budget
from retriever.budget import DEFAULT_FILL, PAPERS_FILL, Budget, FillRule, context_hits, fill
from retriever.edge_store import EdgeNodeStore
from retriever.qdrant_store import QdrantNodeStore
from retriever.schema import ScoredNode, SearchFilter
from retriever.search import candidate_limit
from tests.contracts.test_node_store import DIM, MODEL, make_node, unit_vectors

N = 40


def reference(tokens: Sequence[int], max_tokens: int) -> int:
    """How many leading nodes the papers' fill takes: stop at the first that does not fit."""
    total = 0
    for i, n in enumerate(tokens):
        total += n
        if total > max_tokens:
            return i
    return len(tokens)


@pytest.mark.parametrize(
    ("tokens", "max_tokens", "taken"),
    [
        ([5, 10, 3], 15, 2),  # exactly full, then 3 does not fit
        ([10, 50, 1], 20, 1),  # stops at 50: the 1 after it, which would fit, is not taken
        ([30, 1], 20, 0),  # the best node is larger than the whole budget: nothing
        ([0, 20, 0], 20, 3),  # zero-token nodes always fit
        ([20], 20, 1),
        ([], 20, 0),
    ],
)
def test_the_rule_takes_in_order_and_stops_at_the_first_node_that_does_not_fit(
    tokens: list[int], max_tokens: int, taken: int
) -> None:
    assert fill(tokens, int, max_tokens) == tokens[:taken]
    budget = Budget(max_tokens)
    decisions = [budget.take(n) for n in tokens]
    assert decisions == [i < taken for i in range(len(tokens))]  # refused once, refused after
    assert budget.stopped == (taken < len(tokens))
    assert budget.used == sum(tokens[:taken])
    assert budget.left == max_tokens - budget.used


def test_a_stopped_budget_refuses_even_a_zero_token_node() -> None:
    budget = Budget(10)
    assert not budget.take(11)
    assert not budget.take(0)
    assert budget.used == 0


sizes = st.lists(st.integers(0, 400), min_size=N, max_size=N) | st.lists(
    st.integers(0, 30), min_size=N, max_size=N
)
#: Fill rules: either part alone, both, neither (the papers' and the default among them).
rules = st.builds(
    FillRule,
    summary_ranks=st.sampled_from([None, 0, 1, 3]),
    redundant_share=st.sampled_from([None, 0.01, 0.3, 0.5, 1.0]),
    summary_share=st.sampled_from([None, 0.1, 0.25, 1.0]),
)


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(0, 400), max_size=60), max_tokens=st.integers(0, 3000))
def test_fill_budget_is_the_reference_fill(tokens: list[int], max_tokens: int) -> None:
    """fill_budget (collapsed tree's rule, tree_traversal's fill) on hits in score order."""
    hits = [ScoredNode(make_node(f"n{i}", n_tokens=n), 1.0 - i / 100) for i, n in enumerate(tokens)]
    assert fill_budget(hits, max_tokens) == hits[: reference(tokens, max_tokens)]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with (
        EdgeNodeStore(Path(tmp_path_factory.mktemp("edge")) / "s") as edge,
        QdrantNodeStore(QdrantClient(":memory:"), "adrap", owns_client=True) as server,
    ):
        for store in (edge, server):
            store.ensure_collection(DIM, MODEL)
        yield edge, server


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tokens=sizes, max_tokens=st.integers(1, 2500), seed=st.integers(0, 50))
def test_every_store_fill_gives_the_reference_fill_of_its_search(
    stores: tuple[Any, Any], tokens: list[int], max_tokens: int, seed: int
) -> None:
    """Both stores' incremental search_budget (payloads or n_tokens read in batches) and the
    collapsed tree take exactly the reference fill of the full search's hits."""
    nodes = [make_node(f"n{i}", n_tokens=n) for i, n in enumerate(tokens)]
    query, flt = unit_vectors(1, seed=1000 + seed)[0], SearchFilter(tree="t1")
    for store in stores:
        store.upsert(nodes, unit_vectors(N))  # the same ids: the sizes are rewritten
        for limit in (N, candidate_limit(max_tokens)):
            hits = store.search(query, flt, limit)
            want = hits[: reference([h.node.n_tokens for h in hits], max_tokens)]
            got = store.search_budget(query, flt, limit, max_tokens)
            assert [h.node for h in got] == [h.node for h in want]
        got = collapsed_tree(store, query, flt, max_tokens=max_tokens)
        assert [h.node for h in got] == [h.node for h in want]


def tree_nodes(tokens: list[int], fanout: list[int]) -> list[Any]:
    """Leaves of ``tokens`` sizes under summaries of ``fanout`` children each (then a layer
    above those), the summaries' sizes from the same list: a tree's nodes, mixed."""
    leaves = [make_node(f"l{i}", n_tokens=n) for i, n in enumerate(tokens)]
    nodes, below = list(leaves), leaves
    for layer in (1, 2):
        above, i = [], 0
        while i < len(below):
            k = fanout[(i + layer) % len(fanout)]
            kids = below[i : i + k]
            node = make_node(f"s{layer}-{i}", layer=layer, n_tokens=tokens[i % len(tokens)] + 20)
            above.append(node.model_copy(update={"children": tuple(c.node_id for c in kids)}))
            i += k
        nodes += above
        below = above
    return nodes


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tokens=st.lists(st.integers(0, 300), min_size=20, max_size=20),
    fanout=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    max_tokens=st.integers(1, 2500),
    rule=rules,
    seed=st.integers(0, 50),
)
def test_every_store_leaves_out_redundant_summaries_as_the_reference_does(
    stores: tuple[Any, Any],
    tokens: list[int],
    fanout: list[int],
    max_tokens: int,
    rule: FillRule,
    seed: int,
) -> None:
    """Both stores' search_budget with any fill rule, reading hits as the fill goes, and the
    collapsed tree (the default) give the reference: context_hits of the full search's hits."""
    nodes = tree_nodes(tokens, fanout)
    query, flt = unit_vectors(1, seed=2000 + seed)[0], SearchFilter(tree="t1")
    for store in stores:
        store.delete([n.node_id for n in store.scroll(flt, 1000)[0]])
        store.upsert(nodes, unit_vectors(len(nodes), seed=seed))
        limit = candidate_limit(max_tokens)
        want, _ = context_hits(store.search(query, flt, limit), max_tokens, rule)
        got = store.search_budget(query, flt, limit, max_tokens, rule=rule)
        assert [h.node.node_id for h in got] == [h.node.node_id for h in want]
        if rule == DEFAULT_FILL:
            got = collapsed_tree(store, query, flt, max_tokens=max_tokens)
            assert [h.node.node_id for h in got] == [h.node.node_id for h in want]


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 300), min_size=5, max_size=30),
    fanout=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    order=st.randoms(use_true_random=False),
    max_tokens=st.integers(1, 3000),
    rule=rules,
)
def test_a_fill_that_stops_inside_a_prefix_is_the_fill_of_every_hit(
    tokens: list[int], fanout: list[int], order: Any, max_tokens: int, rule: FillRule
) -> None:
    """What lets a store read hits as it goes: once the fill of the hits read so far stops
    inside them, no later hit changes it."""
    nodes = tree_nodes(tokens, fanout)
    order.shuffle(nodes)
    hits = [ScoredNode(n, 1.0 - i / 1000) for i, n in enumerate(nodes)]
    whole, _ = context_hits(hits, max_tokens, rule)
    for end in range(len(hits) + 1):
        part, took_all = context_hits(hits[:end], max_tokens, rule)
        if not took_all:
            assert part == whole
            break
    else:
        assert part == whole


def copy_of(node: Any, of: Any) -> Any:
    """``node`` as a leaf holding the same text as ``of`` (a copy of its file elsewhere)."""
    return node.model_copy(update={"text": of.text, "content_hash": of.content_hash})


def test_a_text_held_twice_is_taken_once() -> None:
    """Copies of a file in a share (``report (1).docx``, a folder copied to another) have leaves
    of the same text: both filled the context, the second adding nothing but its tokens."""
    a, b, c, d = (make_node(k, n_tokens=10) for k in "abcd")
    b = copy_of(b, of=a)
    hits = [ScoredNode(n, 1.0 - i / 10) for i, n in enumerate([a, b, c, d])]
    kept, took_all = context_hits(hits, 30, PAPERS_FILL)
    assert [h.node.node_id for h in kept] == [a.node_id, c.node_id, d.node_id]
    assert took_all
    kept, _ = context_hits(hits, 20, DEFAULT_FILL)
    assert [h.node.node_id for h in kept] == [a.node_id, c.node_id], "its tokens go to the next"


def test_the_default_fill_takes_a_summary_only_as_the_best_hit() -> None:
    """Lower in the ranking an offline summary (a sample of its leaves' sentences) took 8-15 %
    of a context and held almost none of the evidence (LoCoMo): the default fill takes a summary
    only where it is the question's best match; the papers' fill takes every one that fits."""
    a, b, c, x, y = (make_node(k, n_tokens=10) for k in "abcxy")
    s, t = (
        make_node(k, layer=1, n_tokens=10).model_copy(update={"children": (x.node_id, y.node_id)})
        for k in "st"
    )
    hits = [ScoredNode(n, 1.0 - i / 10) for i, n in enumerate([s, a, t, b, c])]
    kept, took_all = context_hits(hits, 100, DEFAULT_FILL)
    assert [h.node.node_id for h in kept] == [s.node_id, a.node_id, b.node_id, c.node_id]
    assert took_all, "every hit not left out was taken: a store reads on"
    kept, _ = context_hits(hits[1:], 100, DEFAULT_FILL)  # t is second now: still left out
    assert [h.node.node_id for h in kept] == [a.node_id, b.node_id, c.node_id]
    kept, _ = context_hits(hits, 100, PAPERS_FILL)
    assert len(kept) == 5


def test_each_part_of_a_fill_rule_applies_on_its_own() -> None:
    """The best-hit rule and the repeated-children rule were one switch (a share, or None for
    neither): a caller could not keep summaries at every rank and still leave out those beside
    their own children (the default before 12-02), nor the reverse."""
    a, x, y, z = (make_node(k, n_tokens=10) for k in "axyz")
    s, t = (
        make_node(k, layer=1, n_tokens=10).model_copy(update={"children": kids})
        for k, kids in (("s", (x.node_id, y.node_id)), ("t", (a.node_id, z.node_id)))
    )
    # s is the best hit with both its children in the context; t sits lower, beside one of two.
    hits = [ScoredNode(n, 1.0 - i / 10) for i, n in enumerate([s, x, y, t, a])]

    def ids(rule: FillRule) -> list[str]:
        kept, _ = context_hits(hits, 100, rule)
        return [h.node.node_id for h in kept]

    assert ids(PAPERS_FILL) == [s.node_id, x.node_id, y.node_id, t.node_id, a.node_id]
    assert ids(FillRule(redundant_share=0.3)) == [x.node_id, y.node_id, a.node_id]
    assert ids(FillRule(redundant_share=1.0)) == [x.node_id, y.node_id, t.node_id, a.node_id]
    assert ids(FillRule(summary_ranks=1)) == [s.node_id, x.node_id, y.node_id, a.node_id]
    assert ids(FillRule(summary_ranks=0)) == [x.node_id, y.node_id, a.node_id]
    assert ids(FillRule(summary_ranks=4, redundant_share=1.0)) == ids(FillRule(redundant_share=1.0))
    assert ids(DEFAULT_FILL) == [x.node_id, y.node_id, a.node_id]


def test_a_summary_longer_than_its_share_of_the_budget_is_left_out() -> None:
    """In a 500-token context a best-hit summary took the place of a leaf that answers (LoCoMo:
    0.5-2.1 points under flat search in every category): the default fill leaves out a summary
    longer than a quarter of the budget, and the leaves behind it fill the context; at a budget
    four times its length it is taken as before."""
    a, b = (make_node(k, n_tokens=200) for k in "ab")
    s = make_node("s", layer=1, n_tokens=150).model_copy(update={"children": ("x", "y")})
    hits = [ScoredNode(n, 1.0 - i / 10) for i, n in enumerate([s, a, b])]

    def ids(rule: FillRule, budget: int) -> list[str]:
        kept, _ = context_hits(hits, budget, rule)
        return [h.node.node_id for h in kept]

    assert ids(PAPERS_FILL, 500) == [s.node_id, a.node_id]
    assert ids(DEFAULT_FILL, 500) == [a.node_id, b.node_id]
    assert ids(DEFAULT_FILL, 600) == [s.node_id, a.node_id, b.node_id]
    assert ids(FillRule(summary_share=0.25), 599) == [a.node_id, b.node_id]
    # A summary that would not fit at all is passed over, where the papers' fill stops at it.
    big = make_node("t", layer=1, n_tokens=900).model_copy(update={"children": ("x",)})
    kept, _ = context_hits([ScoredNode(big, 1.0), *hits[1:]], 500, FillRule(summary_share=1.0))
    assert [h.node.node_id for h in kept] == [a.node_id, b.node_id]
    kept, _ = context_hits([ScoredNode(big, 1.0), *hits[1:]], 500, PAPERS_FILL)
    assert kept == []


@pytest.mark.parametrize(
    ("ranks", "share", "cap"),
    [(-1, None, None), (None, 0.0, None), (None, 1.5, None), (1, -0.2, None), (1, 0.3, 0.0)],
)
def test_a_fill_rule_out_of_range_is_refused(
    ranks: int | None, share: float | None, cap: float | None
) -> None:
    with pytest.raises(ValueError, match=r"summary_ranks|redundant_share|summary_share"):
        FillRule(summary_ranks=ranks, redundant_share=share, summary_share=cap)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tokens=sizes, max_tokens=st.integers(1, 2500), seed=st.integers(0, 50))
def test_every_store_fill_takes_a_text_held_twice_once(
    stores: tuple[Any, Any], tokens: list[int], max_tokens: int, seed: int
) -> None:
    """Both stores' search_budget and the collapsed tree over a share whose every third leaf is a
    copy of another: the reference fill of the search's hits, and no text twice."""
    nodes = [make_node(f"n{i}", n_tokens=n) for i, n in enumerate(tokens)]
    nodes = [copy_of(n, of=nodes[i // 3]) if i % 3 == 2 else n for i, n in enumerate(nodes)]
    query, flt = unit_vectors(1, seed=3000 + seed)[0], SearchFilter(tree="t1")
    for store in stores:
        store.delete([n.node_id for n in store.scroll(flt, 1000)[0]])  # no ties with others'
        store.upsert(nodes, unit_vectors(N, seed=seed))
        limit = candidate_limit(max_tokens)
        want, _ = context_hits(store.search(query, flt, limit), max_tokens, PAPERS_FILL)
        for got in (
            store.search_budget(query, flt, limit, max_tokens),
            collapsed_tree(store, query, flt, max_tokens=max_tokens),
        ):
            assert [h.node.node_id for h in got] == [h.node.node_id for h in want]
            texts = [h.node.content_hash for h in got]
            assert len(texts) == len(set(texts)), "a text held twice was taken twice"


def test_equal_scores_are_taken_in_the_order_of_their_ids(stores: tuple[Any, Any]) -> None:
    """Copies of a file have the same vectors, so their leaves tie; the engine returns ties in no
    set order, which changed with the limit asked for, and with it which copy a fill took (and
    which summaries it left out as repeating their children): a client's recipe and adrap's own
    query disagreed. Ties now go in id order, whatever the limit."""
    nodes = [make_node(f"tie{i}", n_tokens=10) for i in range(12)]
    vectors = unit_vectors(1, seed=5).repeat(12, axis=0)  # one vector: every score ties
    query, flt = unit_vectors(1, seed=5)[0], SearchFilter(tree="t1")
    ordered = sorted(n.node_id for n in nodes)
    for store in stores:
        store.delete([n.node_id for n in store.scroll(flt, 1000)[0]])
        store.upsert(nodes, vectors)
        assert [h.node.node_id for h in store.search(query, flt, 12)] == ordered
        for limit, max_tokens in ((12, 1000), (12, 60), (100, 1000)):
            got = store.search_budget(query, flt, limit, max_tokens)
            assert [h.node.node_id for h in got] == ordered[: max_tokens // 10]
