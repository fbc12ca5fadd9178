"""Hybrid search (schema.SPARSE_VECTOR) and the vectorless meta point, on both stores: a real
qdrant-edge shard and qdrant-client's local mode, searched also with the engines' own requests
(no tree filter), as any client would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as qe
from qdrant_client import QdrantClient, models

from retriever.edge_store import EdgeNodeStore
from retriever.plan import HnswConfig
from retriever.qdrant_store import QdrantNodeStore
from retriever.schema import (
    META_POINT_ID,
    SPARSE_VECTOR,
    VECTOR_NAME,
    MetaPayload,
    NodePayload,
    SearchFilter,
)
from retriever.search import collapsed_tree, fill_budget, tree_traversal
from retriever.sparse import bm25_query
from tests.contracts.test_node_store import DIM, MODEL, make_node, unit_vectors

KINDS = ["edge", "server"]
TARGET = 7  # the node whose text holds the rare term


def corpus(n: int = 40) -> tuple[list[NodePayload], np.ndarray]:
    """Leaves and summaries; node i says "ledger" i times (distinct BM25 scores, no ties) and
    node TARGET alone names the code ``zx4711``."""
    nodes = []
    for i in range(n):
        words = ["ledger"] * (i % 9 + 1) + [f"filler{j}" for j in range(i % 5 + 3)]
        if i == TARGET:
            words.append("zx4711")
        nodes.append(make_node(f"n{i}", layer=int(i >= n - 8), text=" ".join(words)))
    return nodes, unit_vectors(n)


def open_store(kind: str, tmp_path: Path, client: QdrantClient | None) -> Any:
    if kind == "edge":
        return EdgeNodeStore(tmp_path / "e")
    assert client is not None
    return QdrantNodeStore(client, "adrap")


def raw_vectors(store: Any, point: str) -> dict[str, Any]:
    if isinstance(store, EdgeNodeStore):
        records = store.read_shard("read", lambda s: s.retrieve([point], False, True))
    else:
        records = store.client.retrieve("adrap", [point], with_vectors=True)
    return dict(records[0].vector or {}) if records else {}


def unfiltered_ids(store: Any, query: Any, using: str) -> set[str]:
    """Ids a plain search (no filter at all) returns, through the engine's own API."""
    if isinstance(store, EdgeNodeStore):
        request = qe.QueryRequest(limit=1000, query=qe.Query.Nearest(query, using=using))
        return {str(p.id) for p in store.read_shard("query", lambda s: s.query(request))}
    if using == SPARSE_VECTOR:
        query = models.SparseVector(indices=query.indices, values=query.values)
    hits = store.client.query_points("adrap", query=query, using=using, limit=1000).points
    return {str(p.id) for p in hits}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(kind: str) -> Any:
    c = QdrantClient(":memory:") if kind == "server" else None
    yield c
    if c is not None:
        c.close()


def test_every_node_gets_a_bm25_vector_and_the_meta_point_no_vector(
    kind: str, client: Any, tmp_path: Path
) -> None:
    nodes, vectors = corpus()
    with open_store(kind, tmp_path, client) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
        assert store.index.sparse
        assert set(raw_vectors(store, nodes[0].node_id)) >= {VECTOR_NAME, SPARSE_VECTOR}
        assert set(raw_vectors(store, nodes[-1].node_id)) >= {VECTOR_NAME, SPARSE_VECTOR}
        assert raw_vectors(store, META_POINT_ID) == {}


def test_no_plain_search_without_a_tree_filter_returns_the_meta_point(
    kind: str, client: Any, tmp_path: Path
) -> None:
    nodes, vectors = corpus()
    e0 = [1.0] + [0.0] * (DIM - 1)  # what the meta point's vector used to be
    with open_store(kind, tmp_path, client) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
        dense = unfiltered_ids(store, e0, VECTOR_NAME)
        sparse = unfiltered_ids(store, bm25_query("ledger zx4711"), SPARSE_VECTOR)
    assert len(dense) == len(nodes)
    assert META_POINT_ID not in dense | sparse


def test_a_meta_point_written_with_a_vector_loses_it_when_the_store_opens(
    kind: str, client: Any, tmp_path: Path
) -> None:
    """Stores written before: the meta point carried e0 and a plain search could return it."""
    nodes, vectors = corpus()
    e0 = [1.0] + [0.0] * (DIM - 1)
    payload = MetaPayload(embed_model=MODEL, embed_dim=DIM).to_payload()
    with open_store(kind, tmp_path, client) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
        if kind == "edge":
            point = qe.Point(META_POINT_ID, {VECTOR_NAME: e0}, payload)
            store.read_shard("write", lambda s: s.update(qe.UpdateOperation.upsert_points([point])))
        else:
            old = models.PointStruct(id=META_POINT_ID, vector={VECTOR_NAME: e0}, payload=payload)
            client.upsert("adrap", [old])
        assert META_POINT_ID in unfiltered_ids(store, e0, VECTOR_NAME)
    with open_store(kind, tmp_path, client) as store:
        store.ensure_collection(DIM, MODEL)
        assert META_POINT_ID not in unfiltered_ids(store, e0, VECTOR_NAME)
        assert raw_vectors(store, META_POINT_ID) == {}
        store.ensure_collection(DIM, MODEL)  # the meta payload is intact: it still validates


def test_hybrid_search_finds_the_node_that_names_the_exact_term(
    kind: str, client: Any, tmp_path: Path
) -> None:
    nodes, vectors = corpus()
    away = unit_vectors(1, seed=12)[0]  # the target is 14th by the dense vector alone
    flt = SearchFilter(tree="t1")
    with open_store(kind, tmp_path, client) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
        dense = store.search(away, flt, 10)
        # every node in both prefetches: no node scores 1/(k+r) from one list only, a tie
        hybrid = store.search(away, flt, 40, text="what is zx4711?")
        budget = store.search_budget(away, flt, 40, 35, text="what is zx4711?")
        leaves = store.search(away, SearchFilter(tree="t1", max_layer=0), 32, text="zx4711")
    assert nodes[TARGET].node_id not in {h.node.node_id for h in dense}
    assert hybrid[0].node.node_id == nodes[TARGET].node_id
    assert [h.node.node_id for h in budget] == [h.node.node_id for h in fill_budget(hybrid, 35)]
    assert leaves[0].node.node_id == nodes[TARGET].node_id
    assert all(h.node.layer == 0 for h in leaves)


def test_both_stores_give_the_same_hybrid_hits(tmp_path: Path) -> None:
    nodes, vectors = corpus()
    client = QdrantClient(":memory:")
    got = {}
    for kind in KINDS:
        with open_store(kind, tmp_path, client) as store:
            store.ensure_collection(DIM, MODEL)
            store.upsert(nodes, vectors)
            query = unit_vectors(1, seed=5)[0]
            flt = SearchFilter(tree="t1")
            got[kind] = (
                [h.node.node_id for h in store.search(query, flt, 30, text="ledger filler2")],
                [
                    h.node.node_id
                    for h in collapsed_tree(store, query, flt, max_tokens=60, text="ledger")
                ],
                [h.node.node_id for h in tree_traversal(store, query, flt, top_k=3, text="ledger")],
            )
    client.close()
    assert got["edge"] == got["server"]
    assert len(got["edge"][0]) == 30


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_without_bm25_searches_dense_until_index_sparse_adds_it(
    kind: str, tmp_path: Path
) -> None:
    client = QdrantClient(":memory:") if kind == "server" else None
    params = {VECTOR_NAME: DIM}
    if client is None:  # created before the sparse vector: dense only
        config = qe.EdgeConfig(
            vectors={
                n: qe.EdgeVectorParams(size=d, distance=qe.Distance.Cosine)
                for n, d in params.items()
            }
        )
        qe.EdgeShard.create(str(tmp_path / "e"), config).close()
    else:
        client.create_collection(
            "adrap",
            {
                n: models.VectorParams(size=d, distance=models.Distance.COSINE)
                for n, d in params.items()
            },
        )
    nodes, vectors = corpus()
    away = unit_vectors(1, seed=12)[0]
    flt = SearchFilter(tree="t1")
    with open_store(kind, tmp_path, client) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
        assert not store.index.sparse
        dense = store.search(away, flt, 10)
        same = store.search(away, flt, 10, text="zx4711")  # dense, as before
        assert [h.node for h in same] == [h.node for h in dense]
        assert [h.score for h in same] == pytest.approx([h.score for h in dense])
        before = store.scroll(flt, 100)[0]
        assert store.index_sparse() == len(nodes)
        assert store.scroll(flt, 100)[0] == before  # the tree and its summaries are kept
        assert store.search(away, flt, 40, text="zx4711")[0].node.node_id == nodes[TARGET].node_id
        assert store.index_sparse() == 0
        store.upsert([make_node("new", text="zx4711 again")], unit_vectors(1, seed=3))
        assert SPARSE_VECTOR in raw_vectors(store, make_node("new").node_id)
    with open_store(kind, tmp_path, client) as store:  # reopened: read from the store
        store.ensure_collection(DIM, MODEL)
        assert store.index.sparse
    if client is not None:
        client.close()


# -- the facade (Qdrant's REST models over the shard) and qdrant-client's local mode ------------


def assert_same_ranking(got: list[Any], want: list[Any], why: object) -> None:
    """Same scores in the same order, and the same ids per score: RRF gives two nodes the same
    score when each is at the same rank of a different prefetch, and engines order such a tie
    as they like (the last tie may also be cut by the limit differently)."""
    assert [p.score for p in got] == pytest.approx([p.score for p in want], abs=1e-5), why
    groups: dict[float, tuple[set[str], set[str]]] = {}
    for g, w in zip(got, want, strict=True):
        pair = groups.setdefault(round(w.score, 5), (set(), set()))
        pair[0].add(str(g.id))
        pair[1].add(str(w.id))
    last = round(want[-1].score, 5) if want else None
    assert all(a == b for key, (a, b) in groups.items() if key != last), why


def local_query(client: QdrantClient, req: models.QueryRequest) -> list[models.ScoredPoint]:
    """The same request through qdrant-client's local mode."""
    return client.query_points(
        "adrap",
        prefetch=req.prefetch,
        query=req.query,
        using=req.using,
        query_filter=req.filter,
        limit=req.limit or 10,
        with_payload=False,
    ).points


@pytest.mark.parametrize(
    "fusion",
    [
        models.RrfQuery(rrf=models.Rrf(k=60)),
        models.FusionQuery(fusion=models.Fusion.RRF),
        models.FusionQuery(fusion=models.Fusion.DBSF),
        models.RrfQuery(rrf=models.Rrf(k=10, weights=[1.0, 0.5])),
    ],
    ids=["rrf60", "rrf", "dbsf", "rrf-weighted"],
)
def test_the_facade_answers_prefetch_fusion_sparse_and_mmr_like_local_mode(
    fusion: Any, tmp_path: Path
) -> None:
    """The same points in a shard read through EdgeRestReader and in QdrantClient(":memory:"):
    same ids in the same order, same scores. The corpus has no BM25 ties (each node's term
    count and length differ), so each prefetch ranks alike in both."""
    from retriever.facade.edge import EdgeRestReader

    nodes, vectors = corpus()
    client = QdrantClient(":memory:")
    with (
        open_store("server", tmp_path, client) as server,
        open_store("edge", tmp_path, None) as edge,
    ):
        for store in (server, edge):
            store.ensure_collection(DIM, MODEL)
            store.upsert(nodes, vectors)
        reader = EdgeRestReader(edge, "adrap")
        tree = models.Filter(
            must=[models.FieldCondition(key="tree", match=models.MatchValue(value="t1"))]
        )
        leaves = models.Filter(
            must=[models.FieldCondition(key="layer", match=models.MatchValue(value=0))]
        )
        for seed, text in enumerate(["ledger filler2", "ledger zx4711 filler5"]):
            dense = unit_vectors(1, seed=20 + seed)[0].tolist()
            sparse = bm25_query(text)
            sv = models.SparseVector(indices=sparse.indices, values=sparse.values)
            for flt in (tree, leaves, None):
                request = models.QueryRequest(
                    prefetch=[
                        models.Prefetch(query=dense, using="dense", filter=flt, limit=25),
                        models.Prefetch(query=sv, using="bm25", filter=flt, limit=25),
                    ],
                    query=fusion,
                    filter=flt,
                    limit=15,
                    with_payload=False,
                )
                got = reader.query(request).points
                want = local_query(client, request)
                assert len(want) == 15
                assert_same_ranking(got, want, (text, flt))
            for query in (
                models.QueryRequest(query=sv, using="bm25", limit=10),
                models.QueryRequest(
                    query=models.NearestQuery(nearest=dense, mmr=models.Mmr(diversity=0.7)),
                    using="dense",
                    limit=8,
                ),
                models.QueryRequest(
                    query=models.NearestQuery(
                        nearest=dense, mmr=models.Mmr(diversity=0.3, candidates_limit=30)
                    ),
                    using="dense",
                    filter=tree,
                    limit=8,
                ),
            ):
                got = reader.query(query).points
                want = local_query(client, query)
                assert [str(p.id) for p in got] == [str(p.id) for p in want], query
                assert [p.score for p in got] == pytest.approx([p.score for p in want], abs=1e-4)
    client.close()


def test_status_says_whether_the_embedded_store_is_hybrid_and_how_to_make_it(
    tmp_path: Path,
) -> None:
    from ingestor.cli.inspect import _store_index

    config = qe.EdgeConfig(
        vectors={VECTOR_NAME: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)}
    )
    qe.EdgeShard.create(str(tmp_path / "old"), config).close()
    assert "adrap index-sparse" in _store_index(tmp_path / "old")["hybrid_search"]
    with EdgeNodeStore(tmp_path / "old") as store:
        store.ensure_collection(DIM, MODEL)
        store.index_sparse()
    assert _store_index(tmp_path / "old")["hybrid_search"].startswith("yes")
    with EdgeNodeStore(tmp_path / "new") as store:
        store.ensure_collection(DIM, MODEL)
    assert _store_index(tmp_path / "new")["hybrid_search"].startswith("yes")


def test_a_new_embedded_store_maps_its_bm25_index_and_still_finds_the_term(
    tmp_path: Path,
) -> None:
    """The inverted index lives in mapped files (page cache), not pinned in RAM: 0.6-1.25 KB a
    point less anonymous memory (bench/memory.py). Indexed, reopened, it answers as before."""
    nodes, vectors = corpus()
    away = unit_vectors(1, seed=12)[0]
    with EdgeNodeStore(tmp_path / "e", hnsw=HnswConfig(m=4, ef_construct=8, indexing_kb=1)) as s:
        s.ensure_collection(DIM, MODEL)
        s.upsert(nodes, vectors)
        assert s.optimize()  # the sparse index of an optimized segment is the mapped one
    config = json.loads((tmp_path / "e" / "edge_config.json").read_text())
    assert config["sparse_vectors"][SPARSE_VECTOR]["memory"] == "cached"
    with EdgeNodeStore(tmp_path / "e") as store:
        hits = store.search(away, SearchFilter(tree="t1"), 40, text="what is zx4711?")
    assert hits[0].node.node_id == nodes[TARGET].node_id
