"""The hybrid search's bound (retriever.sparse.HybridBound): the BM25 query keeps its rarest terms
while their postings, estimated from a sample of the store's own BM25 vectors, fit a budget, and
the prefetches are no deeper than the bound says; the same query on both stores (a real
qdrant-edge shard, qdrant-client's local mode)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient

import retriever.edge_store as edge_store
import retriever.qdrant_store as qdrant_store
from retriever.edge_store import EdgeNodeStore
from retriever.qdrant_store import QdrantNodeStore
from retriever.schema import NodePayload, SearchFilter
from retriever.sparse import (
    SAMPLE_TTL,
    UNBOUNDED,
    HybridBound,
    TermSample,
    bm25_query,
    bounded_query,
)
from tests.contracts.test_node_store import DIM, MODEL, make_node, unit_vectors

KINDS = ["edge", "server"]
N = 120
TARGET = 23  # the one node that names the code (and says filler3)


def corpus() -> tuple[list[NodePayload], np.ndarray]:
    """Every node says "ledger" (a posting list as long as the store) and "filler<i % 5>" (24
    nodes each); node TARGET alone names the code ``zx4711``."""
    nodes = []
    for i in range(N):
        words = ["ledger"] * (i % 4 + 1) + [f"filler{i % 5}"]
        if i == TARGET:
            words.append("zx4711")
        nodes.append(make_node(f"n{i}", text=" ".join(words)))
    return nodes, unit_vectors(N)


def term(word: str) -> int:
    return int(bm25_query(word).indices[0])


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    client = QdrantClient(":memory:") if request.param == "server" else None
    opened: Any = (
        EdgeNodeStore(tmp_path / "e") if client is None else QdrantNodeStore(client, "adrap")
    )
    with opened as s:
        s.ensure_collection(DIM, MODEL)
        nodes, vectors = corpus()
        s.upsert(nodes, vectors)
        yield s
    if client is not None:
        client.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The BM25 query vectors the stores send (the real function, its results recorded)."""
    seen: list[Any] = []

    def spy(text: str, sample: TermSample | None, bound: HybridBound, hits: int) -> Any:
        query = bounded_query(text, sample, bound, hits)
        seen.append(query)
        return query

    monkeypatch.setattr(edge_store, "bounded_query", spy)
    monkeypatch.setattr(qdrant_store, "bounded_query", spy)
    return seen


def test_the_query_keeps_its_rarest_terms_while_their_postings_fit() -> None:
    sample = TermSample.of([[1, 2, 3], [1, 2], [1], [1, 4]], points=400)
    assert [sample.postings(t) for t in (1, 2, 9)] == [400, 200, 0]
    query = bm25_query("ledger filler zx4711")
    common, mid, rare = (term(w) for w in ("ledger", "filler", "zx4711"))
    counts = TermSample({common: 100, mid: 10}, sampled=100, points=10_000)
    cut = bounded_query("ledger filler zx4711", counts, HybridBound(postings=2_000))
    assert list(cut.indices) == sorted([mid, rare])  # 0 + 1,000 fit; + 10,000 does not
    cut = bounded_query("ledger filler zx4711", counts, HybridBound(postings=500))
    assert list(cut.indices) == [rare]
    only_common = bounded_query("ledger filler", counts, HybridBound(postings=1))
    assert list(only_common.indices) == [mid]  # the rarest is always kept
    # ... and more while the BM25 prefetch's hits would not be found (DBSF of a lone hit: 0.5)
    filled = bounded_query("ledger filler zx4711", counts, HybridBound(postings=500), hits=32)
    assert list(filled.indices) == sorted([mid, rare])
    for sample_, bound in ((None, HybridBound(postings=1)), (counts, HybridBound(postings=None))):
        whole = bounded_query("ledger filler zx4711", sample_, bound)
        assert list(whole.indices) == list(query.indices)


def test_the_bound_caps_each_prefetch_but_never_below_the_hits_asked_for() -> None:
    assert UNBOUNDED.depths(32, 100) == (100, 100)
    assert HybridBound().depths(32, 100) == (32, 32)
    assert HybridBound(depth=32).depths(16, 100) == (32, 32)
    assert HybridBound(depth=32).depths(100, 100) == (100, 100)
    assert HybridBound(depth=32, sparse_depth=16).depths(16, 100) == (32, 16)
    with pytest.raises(ValueError, match="postings must be >= 1"):
        HybridBound(postings=0)


def test_a_stale_sample_is_read_again() -> None:
    sample = TermSample({}, 0, 0)
    assert not sample.stale(sample.taken + SAMPLE_TTL - 1)
    assert sample.stale(sample.taken + SAMPLE_TTL + 1)


def test_the_store_samples_its_own_bm25_vectors(store: Any) -> None:
    store.hybrid_bound = HybridBound(postings=10)
    store.search(unit_vectors(1, seed=3)[0], SearchFilter(tree="t1"), 5, text="ledger zx4711")
    sample = store.term_sample
    assert sample is not None
    assert (sample.sampled, sample.points) == (N, N)
    assert sample.postings(term("ledger")) >= N  # in every node
    assert sample.postings(term("zx4711")) == pytest.approx(sample.points / N)


def test_a_bounded_hybrid_search_drops_the_common_term_and_finds_the_rare_one(
    store: Any, sent: list[Any]
) -> None:
    away = -corpus()[1][TARGET]  # the target is the dense vector's very last node
    flt = SearchFilter(tree="t1")
    dense = [h.node.node_id for h in store.search(away, flt, 100)]
    store.hybrid_bound = HybridBound(postings=N // 2, depth=16)
    question = "ledger filler3 zx4711 ledger"
    hits = store.search_budget(away, flt, 100, 40, text=question)
    target = corpus()[0][TARGET].node_id
    assert target not in dense
    # "ledger" (every node) is cut: zx4711 and filler3 (1 + 24 postings) fill the 16 BM25 hits
    # and fit the 60 postings
    assert [sorted(q.indices) for q in sent] == [sorted([term("filler3"), term("zx4711")])]
    assert hits[0].node.node_id == target
    sent.clear()
    store.hybrid_bound = UNBOUNDED
    store.search_budget(away, flt, 100, 40, text=question)
    assert [len(q.indices) for q in sent] == [3]


def test_both_stores_send_the_same_bounded_query(tmp_path: Path, sent: list[Any]) -> None:
    nodes, vectors = corpus()
    client = QdrantClient(":memory:")
    got = {}
    for kind, opened in (
        ("edge", EdgeNodeStore(tmp_path / "e")),
        ("server", QdrantNodeStore(client, "adrap")),
    ):
        with opened as s:
            s.ensure_collection(DIM, MODEL)
            s.upsert(nodes, vectors)
            s.hybrid_bound = HybridBound(postings=N // 2, depth=8)
            query, flt = unit_vectors(1, seed=5)[0], SearchFilter(tree="t1")
            hits = s.search(query, flt, 8, text="ledger")
            hits += s.search(query, flt, 8, text="ledger filler2")
            got[kind] = (len(hits), [list(q.indices) for q in sent])  # hits: BM25 ties vary
            sent.clear()
    client.close()
    assert got["edge"] == got["server"]
    assert got["edge"] == (16, [[term("ledger")], [term("filler2")]])  # a lone term is kept
