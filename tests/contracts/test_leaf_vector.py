"""Leaves carry their vector twice (schema.LEAF_VECTOR): leaves-only searches walk a graph of the
leaves alone, in both adapters; a store created before it (no ``leaf`` vector) still answers
them, by the exact scan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as qe
from qdrant_client import QdrantClient, models

from retriever.edge_store import EdgeNodeStore
from retriever.plan import Planner
from retriever.qdrant_store import QdrantNodeStore
from retriever.schema import LEAF_VECTOR, SPARSE_VECTOR, VECTOR_NAME, NodePayload, SearchFilter
from tests.contracts.test_node_store import DIM, MODEL, make_node, unit_vectors

WALK = Planner(exact_max_points=0)  # every filter above 0 matching points walks


def corpus() -> tuple[list[NodePayload], np.ndarray]:
    nodes = [make_node(f"l{i}", n_tokens=10) for i in range(80)]
    nodes += [make_node(f"s{i}", layer=1, sources=["docs/a.md"]) for i in range(40)]
    return nodes, unit_vectors(120)


def open_store(kind: str, tmp_path: Path, client: QdrantClient | None) -> Any:
    if kind == "edge":
        return EdgeNodeStore(tmp_path / "e", planner=WALK)
    assert client is not None
    return QdrantNodeStore(client, "adrap", planner=WALK)


def vectors_of(store: Any, kind: str, node_id: str) -> set[str]:
    if kind == "edge":
        rec = store._shard.retrieve([node_id], False, True)[0]
        return set(rec.vector)
    rec = store.client.retrieve("adrap", [node_id], with_vectors=True)[0]
    return set(rec.vector)


def create_old_store(kind: str, tmp_path: Path, client: QdrantClient | None) -> None:
    if kind == "edge":
        params = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)
        shard = qe.EdgeShard.create(
            str(tmp_path / "e"), qe.EdgeConfig(vectors={VECTOR_NAME: params})
        )
        shard.close()
    else:
        assert client is not None
        params = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
        client.create_collection("adrap", {VECTOR_NAME: params})


@pytest.mark.parametrize("kind", ["edge", "server"])
@pytest.mark.parametrize("old", [False, True], ids=["new", "old-store"])
def test_leaves_only_searches_run_on_the_leaves_and_equal_the_exact_answer(
    kind: str, old: bool, tmp_path: Path
) -> None:
    client = QdrantClient(":memory:") if kind == "server" else None
    if old:  # a store created before the leaf vector, as it was: one vector, VECTOR_NAME
        create_old_store(kind, tmp_path, client)
    nodes, vectors = corpus()
    with open_store(kind, tmp_path, client) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
    with open_store(kind, tmp_path, client) as store:  # reopened: the index read from the store
        store.ensure_collection(DIM, MODEL)
        assert store.index.leaf_vector is not old
        leaf, summary = nodes[0].node_id, nodes[-1].node_id
        assert vectors_of(store, kind, summary) == (
            {VECTOR_NAME} if old else {VECTOR_NAME, SPARSE_VECTOR}
        )
        assert vectors_of(store, kind, leaf) == (
            {VECTOR_NAME} if old else {VECTOR_NAME, LEAF_VECTOR, SPARSE_VECTOR}
        )
        flt = SearchFilter(tree="t1", max_layer=0)
        plan = store.plan(flt, 30)
        assert plan.exact is old  # the leaves' own graph is walked; without it, scanned
        for seed in range(3):
            query = unit_vectors(1, seed=10 + seed)[0]
            scores = vectors[:80] @ query
            want = [nodes[i].node_id for i in np.argsort(-scores)[:30]]
            got = store.search(query, flt, 30)
            assert [h.node.node_id for h in got] == want
            assert all(h.node.layer == 0 for h in got)
        everything = store.search(unit_vectors(1, seed=9)[0], SearchFilter(tree="t1"), 120)
        assert len(everything) == 120  # the collapsed tree still sees every node once
    if client is not None:
        client.close()


def test_a_new_collection_is_created_with_both_vectors() -> None:
    client = QdrantClient(":memory:")
    with QdrantNodeStore(client, "adrap", owns_client=True) as store:
        store.ensure_collection(DIM, MODEL)
        vectors = client.get_collection("adrap").config.params.vectors
        assert isinstance(vectors, dict)
        assert vectors == {
            n: models.VectorParams(size=DIM, distance=models.Distance.COSINE)
            for n in (VECTOR_NAME, LEAF_VECTOR)
        }


def test_status_says_whether_the_embedded_store_has_the_leaf_graph(tmp_path: Path) -> None:
    from ingestor.cli.inspect import _leaf_graph

    create_old_store("edge", tmp_path, None)
    assert _leaf_graph(tmp_path / "e").startswith("no: the store predates it")
    with EdgeNodeStore(tmp_path / "new") as store:
        store.ensure_collection(DIM, MODEL)
    assert _leaf_graph(tmp_path / "new").startswith("yes")
