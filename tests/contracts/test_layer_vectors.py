"""Every node carries its vector twice, under VECTOR_NAME and its layer band's own name
(schema.LEAF_VECTOR, schema.SUMMARY_VECTOR): leaves-only and summaries-only searches walk a graph
of that band alone, in both adapters. Stores created before either still answer them: leaves by
the exact scan, summaries by a walk of the graph of every node."""

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
from retriever.schema import (
    LEAF_VECTOR,
    SPARSE_VECTOR,
    SUMMARY_VECTOR,
    VECTOR_NAME,
    NodePayload,
    SearchFilter,
)
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


def create_old_store(
    kind: str, tmp_path: Path, client: QdrantClient | None, names: tuple[str, ...]
) -> None:
    """A store as created before the layers' own vectors: dense ``names`` only."""
    if kind == "edge":
        params = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)
        shard = qe.EdgeShard.create(
            str(tmp_path / "e"), qe.EdgeConfig(vectors=dict.fromkeys(names, params))
        )
        shard.close()
    else:
        assert client is not None
        params = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
        client.create_collection("adrap", dict.fromkeys(names, params))


#: The stores a reopened adapter meets: as created before the leaf vector, before the summary
#: vector, and now.
STORES = {
    "old-store": (VECTOR_NAME,),
    "leaf-only": (VECTOR_NAME, LEAF_VECTOR),
    "new": None,
}
#: Each layer band: its filter, the vector its nodes carry, which nodes of corpus() are in it.
BANDS = {
    "leaves": (SearchFilter(tree="t1", max_layer=0), LEAF_VECTOR, slice(0, 80)),
    "summaries": (SearchFilter(tree="t1", min_layer=1), SUMMARY_VECTOR, slice(80, 120)),
}


@pytest.mark.parametrize("kind", ["edge", "server"])
@pytest.mark.parametrize("made", list(STORES))
@pytest.mark.parametrize("band", list(BANDS))
def test_a_layer_band_search_runs_on_its_own_graph_and_equals_the_exact_answer(
    kind: str, made: str, band: str, tmp_path: Path
) -> None:
    client = QdrantClient(":memory:") if kind == "server" else None
    old = STORES[made]
    if old is not None:
        create_old_store(kind, tmp_path, client, old)
    nodes, vectors = corpus()
    with open_store(kind, tmp_path, client) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
    with open_store(kind, tmp_path, client) as store:  # reopened: the index read from the store
        store.ensure_collection(DIM, MODEL)
        names = old if old is not None else (VECTOR_NAME, LEAF_VECTOR, SUMMARY_VECTOR)
        assert store.index.leaf_vector is (LEAF_VECTOR in names)
        assert store.index.summary_vector is (SUMMARY_VECTOR in names)
        sparse = {SPARSE_VECTOR} if old is None else set()
        leaf, summary = nodes[0].node_id, nodes[-1].node_id
        assert vectors_of(store, kind, leaf) == {VECTOR_NAME, *sparse} | (
            {LEAF_VECTOR} & set(names)
        )
        assert vectors_of(store, kind, summary) == {VECTOR_NAME, *sparse} | (
            {SUMMARY_VECTOR} & set(names)
        )
        flt, own, members = BANDS[band]
        plan = store.plan(flt, 30)
        # Its own graph is walked; leaves without theirs are scanned, summaries walk every node's
        assert plan.exact is (band == "leaves" and own not in names)
        for seed in range(3):
            query = unit_vectors(1, seed=10 + seed)[0]
            scores = vectors[members] @ query
            want = [nodes[members][i].node_id for i in np.argsort(-scores)[:30]]
            got = store.search(query, flt, 30)
            assert [h.node.node_id for h in got] == want
            assert all((h.node.layer == 0) is (band == "leaves") for h in got)
        everything = store.search(unit_vectors(1, seed=9)[0], SearchFilter(tree="t1"), 120)
        assert len(everything) == 120  # the collapsed tree still sees every node once
    if client is not None:
        client.close()


def test_a_walk_of_a_layer_band_plans_against_the_points_of_its_own_graph(tmp_path: Path) -> None:
    """A walk's selectivity is of the graph it walks: t1's 40 summaries are half the summary
    graph, not a quarter of every node."""
    nodes, vectors = corpus()
    nodes += [make_node(f"x{i}", tree="t2", layer=1) for i in range(40)]
    vectors = np.vstack([vectors, unit_vectors(40, seed=3)])
    seen: list[tuple[int, int]] = []

    class Spy(Planner):
        def plan(self, matches: int, total: int, *args: Any, **kw: Any) -> Any:
            seen.append((matches, total))
            return super().plan(matches, total, *args, **kw)

    with EdgeNodeStore(tmp_path / "e", planner=Spy(exact_max_points=0)) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
        store.plan(SearchFilter(tree="t1", min_layer=1), 30)
        store.plan(SearchFilter(tree="t1", max_layer=0), 30)
        store.plan(SearchFilter(tree="t1"), 30)
    # Estimates, not counts: each band's graph has 80 points, the store 161 (the meta point too)
    (_, summaries), (_, leaves), (_, every) = seen
    assert 60 <= summaries <= 100
    assert 60 <= leaves <= 100
    assert every == 161


def test_a_new_collection_is_created_with_the_layers_own_vectors() -> None:
    client = QdrantClient(":memory:")
    with QdrantNodeStore(client, "adrap", owns_client=True) as store:
        store.ensure_collection(DIM, MODEL)
        vectors = client.get_collection("adrap").config.params.vectors
        assert isinstance(vectors, dict)
        assert vectors == {
            n: models.VectorParams(size=DIM, distance=models.Distance.COSINE)
            for n in (VECTOR_NAME, LEAF_VECTOR, SUMMARY_VECTOR)
        }


def test_status_says_whether_the_embedded_store_has_the_layers_graphs(tmp_path: Path) -> None:
    from ingestor.cli.inspect import _store_index

    create_old_store("edge", tmp_path, None, (VECTOR_NAME,))
    assert _store_index(tmp_path / "e")["leaf_graph"].startswith("no: the store predates it")
    with EdgeNodeStore(tmp_path / "new") as store:
        store.ensure_collection(DIM, MODEL)
    assert _store_index(tmp_path / "new")["leaf_graph"].startswith("yes")
    assert _store_index(tmp_path / "e")["summary_graph"].startswith("no: the store predates it")
    assert _store_index(tmp_path / "new")["summary_graph"].startswith("yes")
