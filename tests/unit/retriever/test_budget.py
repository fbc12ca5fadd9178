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
from retriever.budget import Budget, fill
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
