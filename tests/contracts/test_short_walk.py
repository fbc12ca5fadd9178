"""A walk the filter cut off is asked again exactly, by both adapters (retriever.plan.retry_exact).

A filtered HNSW walk that lands among points the filter rejects can return far fewer hits than
asked for (bench/query.py, 100k nodes: 1 hit of score 0.14 where 60k points matched). The
engines here are real; the cut-off walk is made by a shard/client that keeps one hit of every
walk (what the engine returned in that query), so the adapter's answer to it is what is tested.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from retriever import qdrant_store
from retriever.edge_store import EdgeNodeStore
from retriever.plan import Planner, SearchPlan, retry_exact
from retriever.qdrant_store import QdrantNodeStore
from retriever.schema import SearchFilter
from tests.contracts.test_node_store import DIM, MODEL, make_node, unit_vectors

WALK = Planner(exact_max_points=0)  # every filtered query walks


class CutShard:
    """The real edge shard; every walk (not ``exact``) keeps only its first hit."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.exact: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)

    def query(self, request: Any) -> Any:
        self.exact.append(bool(request.params.exact))
        hits = self.shard.query(request)
        return hits if request.params.exact else hits[:1]


class CutClient(QdrantClient):
    """Local mode standing in for a server; every walk keeps only its first hit."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.exact: list[bool] = []

    def query_points(self, *args: Any, **kwargs: Any) -> Any:
        params = kwargs.get("search_params")
        exact = bool(params is not None and params.exact)
        self.exact.append(exact)
        res = super().query_points(*args, **{**kwargs, "search_params": None})
        if not exact:
            res.points = res.points[:1]
        return res


def test_retry_exact_only_when_a_walk_returned_fewer_hits_than_the_filter_keeps() -> None:
    walk = SearchPlan(exact=False, hnsw_ef=128, matches=60_000)
    assert retry_exact(walk, 100, 1) == SearchPlan(exact=True, hnsw_ef=None, matches=60_000)
    assert retry_exact(walk, 100, 100) is None
    few = SearchPlan(exact=False, hnsw_ef=128, matches=7)  # the filter keeps 7: 7 hits is all
    assert retry_exact(few, 100, 7) is None
    assert retry_exact(few, 100, 6) is not None
    assert retry_exact(SearchPlan(exact=True, hnsw_ef=None, matches=60_000), 100, 1) is None
    scan = SearchPlan(exact=False, hnsw_ef=128, matches=60_000, oversampling=2.0, scan=True)
    assert retry_exact(scan, 100, 1) is None  # a scan is not cut off by the filter
    assert retry_exact(SearchPlan(exact=False, hnsw_ef=128, matches=None), 100, 1) is None


@pytest.mark.parametrize("kind", ["edge", "server"])
def test_a_cut_off_walk_is_answered_by_the_exact_scan(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = [make_node(f"n{i}", n_tokens=10) for i in range(60)]
    nodes += [make_node(f"o{i}", tree="t2", n_tokens=10) for i in range(60)]
    vectors = unit_vectors(120)
    query, flt = unit_vectors(1, seed=4)[0], SearchFilter(tree="t1")
    if kind == "edge":
        store: Any = EdgeNodeStore(tmp_path / "e", planner=WALK)
    else:
        monkeypatch.setattr(qdrant_store, "_is_local", lambda client: False)  # send the plan
        store = QdrantNodeStore(CutClient(), "adrap", owns_client=True, planner=WALK)
    with store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
        scores = vectors[:60] @ query
        want = [nodes[i].node_id for i in sorted(range(60), key=lambda i: -scores[i])[:20]]
        if kind == "edge":
            spy = store._shard = CutShard(store._shard)
        else:
            spy = store.client
        hits = store.search(query, flt, 20)
        assert [h.node.node_id for h in hits] == want
        assert spy.exact == [False, True]  # the walk, then the exact scan
        spy.exact.clear()
        kept = store.search_budget(query, flt, 20, 55)  # the budget's own first query too
        assert [h.node.node_id for h in kept] == want[:5]
        assert spy.exact == [False, True]
