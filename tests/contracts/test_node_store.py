"""Every NodeStore implementation passes the same tests: qdrant-edge on disk, qdrant-client local.

The congruence test runs the same searches through both adapters and exact numpy brute force.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge
from numpy.typing import NDArray
from qdrant_client import QdrantClient, models

from retriever import edge_store, edge_translate, qdrant_collection, qdrant_store
from retriever.budget import DEFAULT_FILL, PAPERS_FILL, FillRule
from retriever.edge_store import EdgeNodeStore
from retriever.errors import SchemaMismatchError, StoreError
from retriever.plan import HnswConfig, Planner
from retriever.protocols import NodeStore
from retriever.qdrant_store import QdrantNodeStore
from retriever.schema import (
    META_POINT_ID,
    META_TREE,
    F,
    Kind,
    NodePayload,
    SearchFilter,
    point_id,
    source_dirs,
)
from retriever.search import collapsed_tree, fill_budget

DIM = 16
MODEL = "test-model"


# -- builders ------------------------------------------------------------------------------------


def make_node(
    key: str,
    *,
    tree: str = "t1",
    layer: int = 0,
    source: str | None = "docs/a.md",
    sources: Sequence[str] | None = None,
    n_tokens: int = 10,
    text: str | None = None,
) -> NodePayload:
    """Return a valid NodePayload: chunk at layer 0, summary above, sources/source_dirs set."""
    leaf = layer == 0
    srcs = tuple(sources) if sources is not None else ((source,) if source else ())
    dirs = tuple(sorted({d for s in srcs for d in source_dirs(s)}))
    return NodePayload(
        node_id=point_id(f"{tree}/{key}"),
        tree=tree,
        layer=layer,
        kind=Kind.CHUNK if leaf else Kind.SUMMARY,
        text=text if text is not None else f"text of {key}",
        n_tokens=n_tokens,
        content_hash=f"h-{key}",
        source=source if leaf else None,
        sources=srcs,
        source_dirs=dirs,
        chunk_index=0 if leaf else None,
        char_start=0 if leaf else None,
        char_end=10 if leaf else None,
        summarizer=None if leaf else "extractive",
        embed_model=MODEL,
        updated_at=1.5,
    )


def unit_vectors(n: int, dim: int = DIM, seed: int = 0) -> NDArray[np.float32]:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    out: NDArray[np.float32] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def ids_of(nodes: Sequence[NodePayload]) -> list[str]:
    return [n.node_id for n in nodes]


# -- fixtures ------------------------------------------------------------------------------------


class Backend:
    """Opens stores on one storage (edge folder or in-memory client), as a restart would."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.path = tmp_path / "qdrant"
        self.client = QdrantClient(":memory:") if kind == "server" else None
        self.opened: list[Any] = []

    def open(self) -> Any:
        for opened in self.opened:
            opened.close()  # the edge folder is locked by its opener
        store: Any = (
            EdgeNodeStore(self.path)
            if self.client is None
            else QdrantNodeStore(self.client, "adrap")
        )
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()
        if self.client is not None:
            self.client.close()


@pytest.fixture(params=["edge", "server"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path)
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> Any:
    s = backend.open()
    s.ensure_collection(DIM, MODEL)
    return s


@pytest.fixture
def module(backend: Backend) -> Any:
    return edge_store if backend.kind == "edge" else qdrant_store


def test_both_adapters_satisfy_the_node_store_protocol(tmp_path: Path) -> None:
    """Structural check by mypy: these assignments fail type-checking if a signature drifts."""
    with EdgeNodeStore(tmp_path / "e") as edge:
        a: NodeStore = edge
    b: NodeStore = QdrantNodeStore(QdrantClient(":memory:"), "adrap", owns_client=True)
    b.close()
    assert a is edge


# -- round trips ---------------------------------------------------------------------------------


def test_upsert_then_count_retrieve_and_search_round_trip(store: Any) -> None:
    nodes = [make_node(f"n{i}", layer=i % 3) for i in range(6)]
    vectors = unit_vectors(6)
    store.upsert(nodes, vectors)

    assert store.count(SearchFilter(tree="t1")) == 6
    assert store.retrieve(ids_of(nodes)) == nodes
    hits = store.search(vectors[2], SearchFilter(tree="t1"), limit=3)
    assert hits[0].node == nodes[2]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert len(hits) == 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_reupsert_is_idempotent_and_overwrites_payload(store: Any) -> None:
    nodes = [make_node(f"n{i}") for i in range(4)]
    store.upsert(nodes, unit_vectors(4))
    store.upsert(nodes, unit_vectors(4))
    changed = nodes[1].model_copy(update={"text": "new text", "n_tokens": 99})
    store.upsert([changed], unit_vectors(1, seed=5))

    assert store.count(SearchFilter(tree="t1")) == 4
    assert store.retrieve([changed.node_id]) == [changed]


def test_delete_removes_points_and_ignores_unknown_ids(store: Any) -> None:
    nodes = [make_node(f"n{i}") for i in range(5)]
    store.upsert(nodes, unit_vectors(5))
    store.delete([nodes[0].node_id, nodes[3].node_id, point_id("never-written")])
    store.delete([])

    assert store.count(SearchFilter(tree="t1")) == 3
    assert ids_of(store.retrieve(ids_of(nodes))) == ids_of([nodes[1], nodes[2], nodes[4]])


def test_a_reader_filter_keeps_nodes_whose_every_class_is_readable(store: Any) -> None:
    """A node is readable only if every access class it lists is (a summary over a private
    file and a public one is the readers-of-both's), and a node listing none is the owner's."""
    classes = [("pub",), ("hr",), ("hr", "pub"), ()]
    nodes = [
        make_node(f"n{i}", layer=int(bool(i % 2))).model_copy(update={"access": c})
        for i, c in enumerate(classes)
    ]
    store.upsert(nodes, unit_vectors(4))

    def seen(readable: tuple[str, ...] | None) -> set[str]:
        flt = SearchFilter(tree="t1", readable=readable)
        hits = store.search(unit_vectors(1, seed=9)[0], flt, limit=10)
        assert store.count(flt) == len(hits)
        return {h.node.node_id for h in hits}

    assert seen(None) == set(ids_of(nodes))
    assert seen(("pub",)) == {nodes[0].node_id}
    assert seen(("pub", "hr")) == set(ids_of(nodes[:3]))
    assert seen(()) == set()
    # A permission change: the field alone is rewritten, the rest of the point kept.
    store.set_access({("pub",): [nodes[1].node_id, nodes[2].node_id]})
    assert seen(("pub",)) == set(ids_of(nodes[:3]))
    assert store.retrieve([nodes[1].node_id])[0] == nodes[1].model_copy(update={"access": ("pub",)})


def test_search_budget_equals_the_fill_of_a_full_search(store: Any) -> None:
    """The two-step search_budget returns exactly fill_budget(search(...)) with fewer payloads."""
    rng = np.random.default_rng(7)
    nodes = [make_node(f"n{i}", layer=i % 3, n_tokens=int(rng.integers(5, 120))) for i in range(40)]
    store.upsert(nodes, unit_vectors(40))
    for seed, budget in [(1, 1), (2, 100), (3, 500), (4, 100_000)]:
        query = unit_vectors(1, seed=seed)[0]
        flt = SearchFilter(tree="t1", min_layer=0 if seed % 2 else 1)
        want = fill_budget(store.search(query, flt, 30), budget)
        got = store.search_budget(query, flt, 30, budget)
        assert [h.node for h in got] == [h.node for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)
    with pytest.raises(ValueError, match="max_tokens"):
        store.search_budget(query, flt, 30, 0)


def test_edge_search_budget_reads_few_payloads_past_the_first_batch(tmp_path: Path) -> None:
    """After the first 16 it reads what the tokens left can take, not another doubled batch."""
    nodes = [make_node(f"n{i}", n_tokens=10) for i in range(100)]
    with EdgeNodeStore(tmp_path / "s") as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, unit_vectors(100))
        asked: list[int] = []
        payloads = store._payloads

        def counting(point_ids: list[Any]) -> dict[Any, dict[str, Any]]:
            asked.append(len(point_ids))
            return payloads(point_ids)

        store._payloads = counting  # type: ignore[method-assign]
        got = store.search_budget(unit_vectors(1, seed=5)[0], SearchFilter(tree="t1"), 100, 205)
    assert len(got) == 20
    assert asked == [16, 5]  # 16, then (205 - 160) // 10 + 1: 4 that fit and 1 that does not


class SpyHit:
    """An engine hit whose id reads are counted (each read builds a uuid.UUID)."""

    def __init__(self, hit: Any, spy: SpyShard) -> None:
        self.hit, self.spy, self.score, self.payload = hit, spy, hit.score, hit.payload

    @property
    def id(self) -> Any:
        self.spy.ids_read += 1
        return self.hit.id


class SpyShard:
    """The real edge shard, with its cardinality estimates and hit-id reads counted."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.estimates = 0
        self.ids_read = 0
        self.limits: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)

    def count(self, request: Any) -> int:
        self.estimates += 1
        return int(self.shard.count(request))

    def query(self, request: Any) -> list[SpyHit]:
        self.limits.append(request.limit)
        return [SpyHit(h, self) for h in self.shard.query(request)]


class LimitClient(QdrantClient):
    """Local mode, recording the ``limit`` of every query the adapter sends."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.limits: list[int] = []

    def query_points(self, *args: Any, **kwargs: Any) -> Any:
        self.limits.append(kwargs["limit"])
        return super().query_points(*args, **kwargs)


def test_the_default_collapsed_fill_reads_no_more_payloads_than_the_plain_fill_needs(
    tmp_path: Path,
) -> None:
    """Leaving out summaries that repeat their children costs no wider read: where no summary
    is left out, the default fill reads exactly the payloads of the papers' fill (it once read
    those of a 1.5x budget in case one was: 27 here); where one is, only what its tokens take."""
    leaves = [make_node(f"n{i}", n_tokens=10) for i in range(100)]
    summary = make_node("s", layer=1, n_tokens=50).model_copy(
        update={"children": tuple(n.node_id for n in leaves[:3])}
    )
    vectors = unit_vectors(101, seed=3)
    query = vectors[100] = vectors[0]  # the summary and its child n0 are the best hits
    asked: list[int] = []

    def counting(payloads: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        def count(point_ids: list[Any]) -> Any:
            asked.append(len(point_ids))
            return payloads(point_ids)

        return count

    def reads(store: EdgeNodeStore, rule: FillRule) -> tuple[int, list[str]]:
        asked.clear()
        got = collapsed_tree(store, query, SearchFilter(tree="t1"), max_tokens=205, rule=rule)
        return sum(asked), [h.node.node_id for h in got]

    for nodes in (leaves, [*leaves, summary]):
        with EdgeNodeStore(tmp_path / f"s{len(nodes)}") as store:
            store.ensure_collection(DIM, MODEL)
            store.upsert(nodes, vectors[: len(nodes)])
            store._payloads = counting(store._payloads)  # type: ignore[method-assign,assignment]
            plain_read, plain = reads(store, PAPERS_FILL)
            default_read, default = reads(store, DEFAULT_FILL)
        if len(nodes) == len(leaves):
            assert (default_read, default) == (plain_read, plain) == (21, default)
            assert len(default) == 20  # 16 read, then what (205 - 160) // 10 + 1 takes
        else:
            assert summary.node_id in plain[:2]
            assert len(plain) == 16  # 50 + 15 leaves
            assert summary.node_id not in default
            assert len(default) == 20  # its 50 tokens: 5 leaves
            assert default_read == 16 + 6  # then what the 55 tokens left take, and one more


def test_search_budget_asks_first_for_the_hits_the_budget_can_take(tmp_path: Path) -> None:
    """10-token nodes: a 55-token budget sends one query for first_hits(100, 55) = 16 hits; a
    budget that all 16 fit in sends a second one for the whole limit, filled as a full search."""
    nodes = [make_node(f"n{i}", n_tokens=10) for i in range(100)]
    client = LimitClient()
    with (
        EdgeNodeStore(tmp_path / "e") as edge,
        QdrantNodeStore(client, "adrap", owns_client=True) as server,
    ):
        for store in (edge, server):
            store.ensure_collection(DIM, MODEL)
            store.upsert(nodes, unit_vectors(100))
        spy = SpyShard(edge._shard)
        edge._shard = spy  # type: ignore[assignment]
        query, flt = unit_vectors(1, seed=3)[0], SearchFilter(tree="t1")
        for store, limits in ((edge, spy.limits), (server, client.limits)):
            want = fill_budget(store.search(query, flt, 100), 300)
            limits.clear()
            assert len(store.search_budget(query, flt, 100, 55)) == 5
            assert limits == [16]
            got = store.search_budget(query, flt, 100, 300)
            assert limits == [16, 16, 100]
            assert [h.node for h in got] == [h.node for h in want]


def test_edge_search_budget_reads_only_the_ids_of_the_hits_it_fetches(tmp_path: Path) -> None:
    """Of 100 hits, a budget of 55 tokens fetches the first batch of 16: 16 ids read, not 100."""
    nodes = [make_node(f"n{i}", n_tokens=10) for i in range(100)]
    with EdgeNodeStore(tmp_path / "s") as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, unit_vectors(100))
        query = unit_vectors(1, seed=5)[0]
        want = fill_budget(store.search(query, SearchFilter(tree="t1"), 100), 55)
        spy = SpyShard(store._shard)
        store._shard = spy  # type: ignore[assignment]
        got = store.search_budget(query, SearchFilter(tree="t1"), 100, 55)
        assert [h.node for h in got] == [h.node for h in want]
        assert len(got) == 5
        assert spy.ids_read == 16


def test_edge_plans_from_an_estimate_kept_until_the_next_write(tmp_path: Path) -> None:
    """The cardinality estimate is read once per filter, and again after upsert/delete/optimize."""
    nodes = [make_node(f"n{i}", layer=i % 2) for i in range(40)]
    with EdgeNodeStore(tmp_path / "s") as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes[:20], unit_vectors(20))
        spy = SpyShard(store._shard)
        store._shard = spy  # type: ignore[assignment]
        flt, query = SearchFilter(tree="t1"), unit_vectors(1, seed=2)[0]
        assert store.plan(flt, 10).matches == 20
        store.search(query, flt, 10)
        store.search_budget(query, flt, 10, 100)
        assert spy.estimates == 1
        store.plan(SearchFilter(tree="t1", min_layer=1), 10)
        assert spy.estimates == 3  # its matches, and the points of the summaries' graph
        store.upsert(nodes[20:], unit_vectors(20, seed=1))
        assert store.plan(flt, 10).matches == 40
        store.delete(ids_of(nodes[:5]))
        assert store.plan(flt, 10).matches == 35
        store.optimize()
        store.plan(flt, 10)
        assert spy.estimates == 6


def test_retrieve_keeps_given_order_and_skips_missing_ids(store: Any) -> None:
    nodes = [make_node(f"n{i}") for i in range(4)]
    store.upsert(nodes, unit_vectors(4))
    wanted = [nodes[3].node_id, point_id("missing"), nodes[0].node_id, nodes[2].node_id]

    assert store.retrieve(wanted) == [nodes[3], nodes[0], nodes[2]]
    assert store.retrieve([]) == []


def test_retrieve_vectors_returns_stored_normalised_vectors(store: Any) -> None:
    nodes = [make_node(f"n{i}") for i in range(3)]
    vectors = unit_vectors(3)
    store.upsert(nodes, vectors * np.float32(3.0))

    got = store.retrieve_vectors([nodes[2].node_id, nodes[0].node_id])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, vectors[[2, 0]], atol=1e-6)
    assert store.retrieve_vectors([]).shape == (0, DIM)


def test_retrieve_vectors_names_missing_ids(store: Any) -> None:
    store.upsert([make_node("n0")], unit_vectors(1))
    missing = point_id("missing")
    with pytest.raises(StoreError, match=missing):
        store.retrieve_vectors([make_node("n0").node_id, missing])


def test_upsert_rejects_mismatched_shapes_and_bad_vectors(store: Any) -> None:
    nodes = [make_node(f"n{i}") for i in range(3)]
    with pytest.raises(ValueError, match="shape"):
        store.upsert(nodes, unit_vectors(2))
    with pytest.raises(ValueError, match="dimensions"):
        store.upsert(nodes, unit_vectors(3, dim=DIM + 1))
    with pytest.raises(ValueError, match="shape"):
        store.upsert(nodes[:1], unit_vectors(1)[0])
    bad = unit_vectors(3)
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        store.upsert(nodes, bad)
    with pytest.raises(ValueError, match="query vector"):
        store.search(unit_vectors(1, dim=DIM + 1)[0], SearchFilter(tree="t1"), limit=3)
    assert store.count(SearchFilter(tree="t1")) == 0


# -- filters -------------------------------------------------------------------------------------


def test_two_trees_do_not_see_each_other(store: Any) -> None:
    one = [make_node(f"a{i}", tree="t1") for i in range(3)]
    two = [make_node(f"b{i}", tree="t2") for i in range(4)]
    store.upsert(one + two, unit_vectors(7))
    query = unit_vectors(1, seed=9)[0]

    assert {h.node.tree for h in store.search(query, SearchFilter(tree="t1"), 10)} == {"t1"}
    assert len(store.search(query, SearchFilter(tree="t2"), 10)) == 4
    assert store.count(SearchFilter(tree="t1")) == 3
    assert set(store.iter_ids("t2")) == set(ids_of(two))
    assert store.search(query, SearchFilter(tree="nope"), 10) == []


def test_layer_range_filters_search_and_count(store: Any) -> None:
    nodes = [make_node(f"n{i}", layer=i % 4) for i in range(12)]
    store.upsert(nodes, unit_vectors(12))
    query = unit_vectors(1, seed=3)[0]

    mid = store.search(query, SearchFilter(tree="t1", min_layer=1, max_layer=2), 20)
    assert sorted({h.node.layer for h in mid}) == [1, 2]
    assert len(mid) == 6
    assert store.count(SearchFilter(tree="t1", min_layer=2)) == 6
    assert store.count(SearchFilter(tree="t1", max_layer=0)) == 3


def test_source_folder_prefix_matches_leaves_and_summaries(store: Any) -> None:
    leaf_r = make_node("r", source="reports/2024/q1.md")
    leaf_d = make_node("d", source="docs/x.md")
    summary = make_node("s", layer=1, sources=["reports/2024/q1.md", "docs/x.md"])
    other = make_node("o", layer=1, sources=["docs/y.md"])
    store.upsert([leaf_r, leaf_d, summary, other], unit_vectors(4))
    query = unit_vectors(1, seed=4)[0]

    def found(prefix: str) -> set[str]:
        hits = store.search(query, SearchFilter(tree="t1", source_prefix=prefix), 10)
        assert store.count(SearchFilter(tree="t1", source_prefix=prefix)) == len(hits)
        return {h.node.node_id for h in hits}

    assert found("reports/") == {leaf_r.node_id, summary.node_id}
    assert found("./reports/2024/") == {leaf_r.node_id, summary.node_id}
    assert found("docs/x.md") == {leaf_d.node_id, summary.node_id}
    assert found("docs/") == {leaf_d.node_id, summary.node_id, other.node_id}
    assert found("reports") == set()  # neither a folder (no "/") nor an exact file


def test_ids_filter_restricts_search_and_count(store: Any) -> None:
    nodes = [make_node(f"n{i}") for i in range(6)]
    store.upsert(nodes, unit_vectors(6))
    wanted = (nodes[1].node_id, nodes[4].node_id)
    flt = SearchFilter(tree="t1", ids=wanted)

    assert {h.node.node_id for h in store.search(unit_vectors(1)[0], flt, 10)} == set(wanted)
    assert store.count(flt) == 2
    assert store.search(unit_vectors(1)[0], SearchFilter(tree="t1", ids=()), 10) == []
    assert store.count(SearchFilter(tree="t1", ids=())) == 0


def test_kind_filter_separates_chunks_and_summaries(store: Any) -> None:
    nodes = [make_node(f"n{i}", layer=i % 2) for i in range(6)]
    store.upsert(nodes, unit_vectors(6))
    query = unit_vectors(1, seed=2)[0]

    chunks = store.search(query, SearchFilter(tree="t1", kind=Kind.CHUNK), 10)
    assert {h.node.kind for h in chunks} == {Kind.CHUNK}
    assert store.count(SearchFilter(tree="t1", kind=Kind.SUMMARY)) == 3


def test_meta_point_is_never_returned_nor_counted(store: Any) -> None:
    nodes = [make_node(f"n{i}") for i in range(3)]
    store.upsert(nodes, unit_vectors(3))
    e0 = np.zeros(DIM, dtype=np.float32)
    e0[0] = 1.0  # the meta point's own vector

    hits = store.search(e0, SearchFilter(tree="t1"), 10)
    assert META_POINT_ID not in {h.node.node_id for h in hits}
    assert len(hits) == 3
    assert store.count(SearchFilter(tree="t1")) == 3
    assert store.retrieve([META_POINT_ID]) == []
    with pytest.raises(ValueError, match="reserved"):
        store.search(e0, SearchFilter(tree=META_TREE), 10)
    with pytest.raises(ValueError, match="reserved"):
        store.count(SearchFilter(tree=META_TREE))
    with pytest.raises(ValueError, match="reserved"):
        store.iter_ids(META_TREE)
    with pytest.raises(ValueError, match="reserved"):
        store.upsert([make_node("m", tree=META_TREE)], unit_vectors(1))


def test_malformed_ids_are_rejected(store: Any) -> None:
    with pytest.raises(ValueError, match="not a uuid"):
        store.retrieve(["not-a-uuid"])
    with pytest.raises(ValueError, match="not a uuid"):
        store.delete(["nope"])
    with pytest.raises(ValueError, match="sequence of ids"):
        store.retrieve(point_id("x"))


def test_iter_ids_pages_through_every_point_of_a_tree(
    store: Any, module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "SCROLL_PAGE", 7)
    nodes = [make_node(f"n{i}") for i in range(30)] + [make_node("x", tree="t2")]
    store.upsert(nodes, unit_vectors(31))

    got = list(store.iter_ids("t1"))
    assert sorted(got) == sorted(ids_of(nodes[:30]))
    assert list(store.iter_ids("empty")) == []


def test_scroll_pages_one_layer_in_id_order_from_an_offset(store: Any) -> None:
    """The dashboard's per-layer paging: each page starts where the last ended, none repeats."""
    nodes = [make_node(f"n{i}", layer=i % 3) for i in range(25)] + [
        make_node("x", tree="t2", layer=1)
    ]
    store.upsert(nodes, unit_vectors(26))
    layer1 = sorted(n.node_id for n in nodes[:25] if n.layer == 1)
    flt = SearchFilter(tree="t1", min_layer=1, max_layer=1)

    seen: list[str] = []
    page, offset = store.scroll(flt, 3)
    seen += [n.node_id for n in page]
    while offset is not None:
        assert offset == layer1[len(seen)]  # the next page starts at the next id
        page, offset = store.scroll(flt, 3, offset)
        seen += [n.node_id for n in page]
    assert seen == layer1
    assert all(n.layer == 1 and n.tree == "t1" for n in store.scroll(flt, 100)[0])
    assert store.scroll(SearchFilter(tree="empty"), 5) == ([], None)
    with pytest.raises(ValueError, match="limit"):
        store.scroll(flt, 0)
    with pytest.raises(ValueError, match="not a uuid"):
        store.scroll(flt, 5, "nope")


def test_scroll_fields_reads_only_those_fields_in_the_same_pages(store: Any) -> None:
    """``scroll_fields`` pages as ``scroll`` does, each point's dict holding only the fields
    asked for (none it lacks), under the same filter, readers' included."""
    nodes = [
        make_node(f"n{i}", layer=i % 3).model_copy(update={"access": ("pub",)}) for i in range(25)
    ]
    nodes[4] = nodes[4].model_copy(update={"access": ("closed",)})
    store.upsert(nodes, unit_vectors(25))
    fields = (F.NODE_ID, F.LAYER, F.PARENTS, F.SOURCE)
    flt = SearchFilter(tree="t1")

    whole: list[NodePayload] = []
    got: list[dict[str, Any]] = []
    page, offset = store.scroll(flt, 4)
    whole += page
    fpage, foffset = store.scroll_fields(flt, fields, 4)
    got += fpage
    while offset is not None:
        assert foffset == offset
        page, offset = store.scroll(flt, 4, offset)
        fpage, foffset = store.scroll_fields(flt, fields, 4, foffset)
        whole += page
        got += fpage
    assert foffset is None
    want = [{k: v for k, v in n.to_payload().items() if k in fields} for n in whole]
    assert [{k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()} for d in got] == [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()} for d in want
    ]
    assert all(set(d) <= set(fields) and F.TEXT not in d for d in got)
    public = SearchFilter(tree="t1", readable=("pub",))
    ids = [d[F.NODE_ID] for d in store.scroll_fields(public, (F.NODE_ID,), 100)[0]]
    assert nodes[4].node_id not in ids
    assert len(ids) == 24
    with pytest.raises(ValueError, match="node fields"):
        store.scroll_fields(flt, ("nope",), 5)
    with pytest.raises(ValueError, match="node fields"):
        store.scroll_fields(flt, (), 5)


def test_upsert_batches_and_large_limits(
    store: Any, module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "UPSERT_BATCH", 4)
    nodes = [make_node(f"n{i}") for i in range(11)]
    store.upsert(nodes, unit_vectors(11))

    assert store.count(SearchFilter(tree="t1")) == 11
    assert len(store.search(unit_vectors(1)[0], SearchFilter(tree="t1"), 1000)) == 11
    assert store.search(unit_vectors(1)[0], SearchFilter(tree="t1"), 0) == []


# -- schema guard --------------------------------------------------------------------------------


def test_reopen_with_same_model_is_accepted(backend: Backend, store: Any) -> None:
    nodes = [make_node(f"n{i}") for i in range(3)]
    store.upsert(nodes, unit_vectors(3))
    again = backend.open()
    again.ensure_collection(DIM, MODEL)

    assert again.retrieve(ids_of(nodes)) == nodes
    assert again.count(SearchFilter(tree="t1")) == 3


@pytest.mark.parametrize(
    ("dim", "model", "expected"),
    [(DIM, "other-model", "other-model"), (DIM * 2, MODEL, f"{DIM * 2}-d")],
)
def test_other_embedding_model_or_dim_is_refused_with_the_fix(
    backend: Backend, store: Any, dim: int, model: str, expected: str
) -> None:
    store.upsert([make_node("n0")], unit_vectors(1))
    again = backend.open()
    with pytest.raises(SchemaMismatchError, match=expected) as info:
        again.ensure_collection(dim, model)
    message = str(info.value)
    assert MODEL in message
    assert "ADRAP_EMBED__MODEL" in message


# -- adapter specifics ---------------------------------------------------------------------------


def test_edge_reopen_from_disk_keeps_data(tmp_path: Path) -> None:
    nodes = [make_node(f"n{i}", layer=i % 2) for i in range(5)]
    vectors = unit_vectors(5)
    with EdgeNodeStore(tmp_path / "s") as first:
        first.ensure_collection(DIM, MODEL)
        first.upsert(nodes, vectors)

    with EdgeNodeStore(tmp_path / "s") as second:
        assert second.dim == DIM
        assert second.retrieve(ids_of(nodes)) == nodes
        hits = second.search(vectors[4], SearchFilter(tree="t1"), 1)
        assert hits[0].node == nodes[4]
        np.testing.assert_allclose(second.retrieve_vectors(ids_of(nodes)), vectors, atol=1e-6)
        second.ensure_collection(DIM, MODEL)


def test_edge_folder_in_use_is_refused_with_the_fix(tmp_path: Path) -> None:
    with EdgeNodeStore(tmp_path / "s") as first:
        first.ensure_collection(DIM, MODEL)
        with pytest.raises(StoreError, match="in use by another adrap process") as info:
            EdgeNodeStore(tmp_path / "s")
        assert "ADRAP_QDRANT__URL" in str(info.value)


def test_edge_store_needs_ensure_collection_and_refuses_use_after_close(tmp_path: Path) -> None:
    store = EdgeNodeStore(tmp_path / "s")
    with pytest.raises(StoreError, match="adrap build"):
        store.count(SearchFilter(tree="t1"))
    store.ensure_collection(DIM, MODEL)
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.count(SearchFilter(tree="t1"))


def test_edge_refuses_a_shard_with_another_vector_size_even_without_meta(tmp_path: Path) -> None:
    with EdgeNodeStore(tmp_path / "s") as first:
        first.ensure_collection(DIM, MODEL)
        first._shard.update(  # type: ignore[union-attr]  # simulate a shard without meta point
            qdrant_edge.UpdateOperation.delete_points([META_POINT_ID])
        )
    with EdgeNodeStore(tmp_path / "s") as second, pytest.raises(SchemaMismatchError, match="8-d"):
        second.ensure_collection(8, MODEL)


def test_edge_optimize_keeps_results_and_auto_optimizes(tmp_path: Path) -> None:
    nodes = [make_node(f"n{i}") for i in range(40)]
    vectors = unit_vectors(40)
    with EdgeNodeStore(tmp_path / "s", auto_optimize_points=10, hnsw_ef=64) as store:
        store.ensure_collection(DIM, MODEL)
        store.upsert(nodes, vectors)
        before = store.search(vectors[7], SearchFilter(tree="t1"), 5)
        store.optimize()
        assert store.search(vectors[7], SearchFilter(tree="t1"), 5) == before


def test_server_name_is_an_alias_of_a_versioned_collection() -> None:
    client = QdrantClient(":memory:")
    store = QdrantNodeStore(client, "adrap", owns_client=True)
    store.ensure_collection(DIM, MODEL)

    aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    assert aliases == {"adrap": "adrap_v1"}
    store.close()


def test_server_rebuild_writes_next_generation_and_promote_switches_alias() -> None:
    client = QdrantClient(":memory:")
    live = QdrantNodeStore(client, "adrap", owns_client=True)
    live.ensure_collection(DIM, MODEL)
    old = make_node("old")
    live.upsert([old], unit_vectors(1))

    nxt = live.create_next_generation(DIM, MODEL)
    new = make_node("new")
    nxt.upsert([new], unit_vectors(1, seed=1))
    assert nxt.collection == "adrap_v2"
    assert live.retrieve([new.node_id]) == []  # readers see the old generation until promote
    nxt.promote()

    assert live.retrieve([new.node_id, old.node_id]) == [new]
    names = {c.name for c in client.get_collections().collections}
    assert names == {"adrap_v2"}
    third = live.create_next_generation(DIM, MODEL)
    assert third.collection == "adrap_v3"
    with pytest.raises(ValueError, match="create_next_generation"):
        live.promote()
    live.close()


def test_server_uses_a_hand_made_collection_with_the_bare_name() -> None:
    client = QdrantClient(":memory:")
    client.create_collection(
        "adrap",
        vectors_config={"dense": models.VectorParams(size=DIM, distance=models.Distance.COSINE)},
    )
    store = QdrantNodeStore(client, "adrap", owns_client=True)
    store.ensure_collection(DIM, MODEL)
    store.upsert([make_node("n")], unit_vectors(1))

    assert client.get_aliases().aliases == []
    assert store.count(SearchFilter(tree="t1")) == 1
    nxt = store.create_next_generation(DIM, MODEL)
    nxt.promote()  # the hand-made collection gives its name to the alias
    assert {a.alias_name: a.collection_name for a in client.get_aliases().aliases} == {
        "adrap": "adrap_v1"
    }
    assert store.count(SearchFilter(tree="t1")) == 0
    store.close()


def test_server_errors_name_the_collection_and_the_fix() -> None:
    client = QdrantClient(":memory:")
    store = QdrantNodeStore(client, "absent", owns_client=True)
    with pytest.raises(StoreError, match=r"'absent'.*adrap build"):
        store.count(SearchFilter(tree="t1"))
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.count(SearchFilter(tree="t1"))


def test_connect_rejects_a_malformed_url() -> None:
    with pytest.raises(StoreError, match="ADRAP_QDRANT__URL"):
        qdrant_collection.connect("ftp://example:6333", timeout=1.0)


# -- congruence ----------------------------------------------------------------------------------


def _random_corpus(n: int, dim: int, seed: int) -> tuple[list[NodePayload], NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    files = ["reports/2024/q1.md", "reports/2024/q2.md", "reports/a.md", "docs/x.md", "docs/y/z.md"]
    nodes = []
    for i in range(n):
        tree = "t1" if rng.random() < 0.6 else "t2"
        layer = int(rng.choice(4, p=[0.7, 0.2, 0.07, 0.03]))
        if layer == 0:
            nodes.append(make_node(f"n{i}", tree=tree, source=str(rng.choice(files))))
        else:
            k = int(rng.integers(1, 4))
            picked = [str(s) for s in rng.choice(files, size=k, replace=False)]
            nodes.append(make_node(f"n{i}", tree=tree, layer=layer, sources=picked))
    return nodes, unit_vectors(n, dim, seed)


def _brute_force(
    nodes: Sequence[NodePayload],
    vectors: NDArray[np.float32],
    query: NDArray[np.float32],
    flt: SearchFilter,
    limit: int,
) -> tuple[list[str], NDArray[np.float64]]:
    source = flt.source_condition()

    def keep(n: NodePayload) -> bool:
        return (
            n.tree == flt.tree
            and (flt.min_layer is None or n.layer >= flt.min_layer)
            and (flt.max_layer is None or n.layer <= flt.max_layer)
            and (flt.kind is None or n.kind == flt.kind)
            and (flt.ids is None or n.node_id in flt.ids)
            and (source is None or source[1] in getattr(n, source[0]))
        )

    mask = np.array([keep(n) for n in nodes])
    idx = np.nonzero(mask)[0]
    scores = vectors[idx].astype(np.float64) @ (query / np.linalg.norm(query)).astype(np.float64)
    order = np.argsort(-scores, kind="stable")[:limit]
    return [nodes[i].node_id for i in idx[order]], scores[order]


def _filters(nodes: Sequence[NodePayload], rng: np.random.Generator) -> list[SearchFilter]:
    some = tuple(str(i) for i in rng.choice(ids_of(nodes), size=40, replace=False))
    return [
        SearchFilter(tree="t1"),
        SearchFilter(tree="t2"),
        SearchFilter(tree="t1", min_layer=1),
        SearchFilter(tree="t1", max_layer=0),
        SearchFilter(tree="t2", min_layer=1, max_layer=2),
        SearchFilter(tree="t1", source_prefix="reports/"),
        SearchFilter(tree="t1", source_prefix="reports/2024/"),
        SearchFilter(tree="t2", source_prefix="docs/x.md"),
        SearchFilter(tree="t1", kind=Kind.SUMMARY),
        SearchFilter(tree="t1", ids=some),
        SearchFilter(tree="t1", ids=some, min_layer=0, max_layer=1, source_prefix="docs/"),
        SearchFilter(tree="t2", kind=Kind.CHUNK, source_prefix="reports/a.md"),
    ]


def test_both_adapters_and_brute_force_agree_on_filtered_searches(tmp_path: Path) -> None:
    """Same corpus, same 36 searches: identical ids, scores within 1e-5, equal to numpy exact."""
    dim = 32
    nodes, vectors = _random_corpus(300, dim, seed=11)
    rng = np.random.default_rng(12)
    client = QdrantClient(":memory:")
    with (
        EdgeNodeStore(tmp_path / "edge") as edge,
        QdrantNodeStore(client, "adrap", owns_client=True) as server,
    ):
        stores: list[Callable[..., Any]] = []
        for s in (edge, server):
            s.ensure_collection(dim, MODEL)
            s.upsert(nodes, vectors)
            stores.append(s.search)
        assert edge.count(SearchFilter(tree="t1")) == server.count(SearchFilter(tree="t1"))

        checked = 0
        for flt in _filters(nodes, rng):
            for limit in (1, 10, 50):
                query = unit_vectors(1, dim, seed=int(rng.integers(1 << 30)))[0]
                want_ids, want_scores = _brute_force(nodes, vectors, query, flt, limit)
                for search in stores:
                    hits = search(query, flt, limit)
                    assert [h.node.node_id for h in hits] == want_ids, flt
                    np.testing.assert_allclose([h.score for h in hits], want_scores, atol=1e-5)
                filled = [s.search_budget(query, flt, limit, 60) for s in (edge, server)]
                assert [h.node for h in filled[0]] == [h.node for h in filled[1]]
                checked += 1
        assert checked == 36


# -- planning: exact scan for selective filters ---------------------------------------------------


class RecordingClient(QdrantClient):
    """Local mode standing in for a server: records the search params a server would receive.

    It reports a URL so the adapter sends params (local mode itself scans exactly whatever they
    say, and warns if given any, so they are recorded and then dropped), and reports the HNSW and
    quantization config a collection was created with, as a server does (local mode forgets it).
    """

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.sent: list[models.SearchParams | None] = []
        self.created: list[dict[str, Any]] = []

    @property
    def init_options(self) -> dict[str, Any]:
        return {**super().init_options, "location": None, "url": "http://recorded:6333"}

    def create_collection(self, *args: Any, **kwargs: Any) -> bool:
        self.created.append({"name": args[0] if args else kwargs["collection_name"], **kwargs})
        return super().create_collection(*args, **kwargs)

    def get_collection(self, collection_name: str, **kwargs: Any) -> models.CollectionInfo:
        info = super().get_collection(collection_name, **kwargs)
        made = [c for c in self.created if c["name"] == collection_name]
        if made:
            info.config.quantization_config = made[-1]["quantization_config"]
            info.config.hnsw_config.full_scan_threshold = made[-1][
                "hnsw_config"
            ].full_scan_threshold
        return info

    def query_points(self, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(kwargs.get("search_params"))
        kwargs["search_params"] = None
        return super().query_points(*args, **kwargs)


def _selective_corpus(n: int, dim: int) -> tuple[list[NodePayload], NDArray[np.float32]]:
    """``n`` nodes of tree t1, about 5 % of them summaries (the selective filter ``layer >= 1``)."""
    rng = np.random.default_rng(3)
    nodes = [make_node(f"n{i}", layer=int(rng.random() < 0.05)) for i in range(n)]
    return nodes, unit_vectors(n, dim, seed=4)


@pytest.mark.parametrize("quantize", [True, False])
def test_store_plans_a_scan_under_the_threshold_and_a_walk_above(
    tmp_path: Path, quantize: bool
) -> None:
    """A new (quantized) store scans with the engine and rescores; one without an int8 copy scans
    exactly; both walk a broad filter. The server adapter plans the same from the same config."""
    nodes, vectors = _selective_corpus(300, DIM)
    planner = Planner(exact_max_points=100)
    hnsw = HnswConfig(quantize=quantize)
    client = RecordingClient()
    with (
        EdgeNodeStore(tmp_path / "e", planner=planner, hnsw=hnsw) as edge,
        QdrantNodeStore(client, "adrap", owns_client=True, planner=planner, hnsw=hnsw) as server,
    ):
        plans = []
        for store in (edge, server):
            store.ensure_collection(DIM, MODEL)
            store.upsert(nodes, vectors)
            selective = SearchFilter(tree="t1", min_layer=1)
            assert 0 < store.count(selective) <= 100
            plan = store.plan(selective, 10)
            assert plan.label == ("scan" if quantize else "exact")
            assert plan.oversampling == (planner.oversampling if quantize else None)
            ids = tuple(n.node_id for n in nodes[:5])
            assert store.plan(SearchFilter(tree="t1", ids=ids), 10).label == plan.label
            broad = store.plan(SearchFilter(tree="t1"), 10)
            assert not broad.exact
            assert not broad.scan
            assert broad.hnsw_ef is not None
            assert broad.hnsw_ef >= 10
            assert broad.oversampling == plan.oversampling
            assert store.plan(SearchFilter(tree="t1", ids=()), 10).label == plan.label
            plans.append((plan.label, broad.scan, broad.oversampling))
        assert plans[0] == plans[1]  # the estimates may differ a little: the engines' own


def test_selective_filter_on_an_hnsw_graph_returns_exactly_the_brute_force_top_k(
    tmp_path: Path,
) -> None:
    """The edge store has a real (deliberately sparse) graph that the engine would walk."""
    dim, limit = 32, 20
    nodes, vectors = _selective_corpus(3000, dim)
    selective = SearchFilter(tree="t1", min_layer=1)
    planner = Planner(exact_max_points=1000)  # the selective filter keeps ~150 of 3000
    walk_only = Planner(exact_max_points=0, hnsw_ef=1, max_hnsw_ef=1)
    sparse = HnswConfig(m=4, ef_construct=8, full_scan_kb=1, indexing_kb=1)
    client = RecordingClient()
    with (
        EdgeNodeStore(
            tmp_path / "e", auto_optimize_points=None, hnsw=sparse, planner=planner
        ) as edge,
        QdrantNodeStore(client, "adrap", owns_client=True, planner=planner, hnsw=sparse) as server,
    ):
        for s in (edge, server):
            s.ensure_collection(dim, MODEL)
            s.upsert(nodes, vectors)
        edge.optimize()
        assert edge.plan(selective, limit).exact  # the engine would walk: full_scan_kb=1
        walk_recalls = []
        for seed in range(5):
            query = unit_vectors(1, dim, seed=100 + seed)[0]
            want, want_scores = _brute_force(nodes, vectors, query, selective, limit)
            for s in (edge, server):
                hits = s.search(query, selective, limit)
                assert [h.node.node_id for h in hits] == want  # recall 1.0, same order
                np.testing.assert_allclose([h.score for h in hits], want_scores, atol=1e-5)
            # What the engine does unplanned: walk the graph of every node (a 150-point graph of
            # the summaries alone, which the store also has, is sometimes walked exactly).
            edge.planner, index = walk_only, edge.index
            edge.index = dataclasses.replace(index, summary_vector=False)
            walked = {h.node.node_id for h in edge.search(query, selective, limit)}
            walk_recalls.append(len(walked & set(want)) / limit)
            edge.planner, edge.index = planner, index
        server.search(vectors[0], SearchFilter(tree="t1"), limit)
    assert min(walk_recalls) < 1.0, "the graph walk was exact anyway: the test proves nothing"
    assert client.sent[0] == models.SearchParams(exact=True)
    broad = client.sent[-1]
    assert broad is not None
    assert not broad.exact
    assert (broad.hnsw_ef or 0) >= limit
    assert broad.quantization == models.QuantizationSearchParams(
        rescore=True, oversampling=planner.oversampling
    )


def test_the_engine_scans_a_quantized_store_and_rescores_to_the_float_top_k(
    tmp_path: Path,
) -> None:
    """A new store is indexed with an int8 copy; the planner's scan of a selective filter is the
    engine's scan of that copy, whose best candidates are rescored with the float vectors."""
    dim, limit = 32, 20
    nodes, vectors = _selective_corpus(3000, dim)
    selective = SearchFilter(tree="t1", min_layer=1)
    graph = HnswConfig(m=8, ef_construct=16, indexing_kb=1)  # a graph, and the int8 copy
    with EdgeNodeStore(tmp_path / "e", auto_optimize_points=None, hnsw=graph) as edge:
        edge.ensure_collection(dim, MODEL)
        edge.upsert(nodes, vectors)
        edge.optimize()
        plan = edge.plan(selective, limit)
        assert plan.scan
        differs = 0
        for seed in range(5):
            query = unit_vectors(1, dim, seed=200 + seed)[0]
            want, want_scores = _brute_force(nodes, vectors, query, selective, limit)
            hits = edge.search(query, selective, limit)
            assert [h.node.node_id for h in hits] == want
            np.testing.assert_allclose([h.score for h in hits], want_scores, atol=1e-5)
            request = qdrant_edge.QueryRequest(
                limit=limit,
                query=qdrant_edge.Query.Nearest(query.tolist(), using="dense"),
                filter=edge_translate.edge_filter(selective),
                with_payload=False,
                with_vector=False,
                params=qdrant_edge.SearchParams(
                    hnsw_ef=plan.hnsw_ef,
                    quantization=qdrant_edge.QuantizationSearchParams(rescore=False),
                ),
            )

            def unrescored(
                shard: qdrant_edge.EdgeShard, r: qdrant_edge.QueryRequest = request
            ) -> list[qdrant_edge.ScoredPoint]:
                return shard.query(r)

            raw = edge.read_shard("query without rescoring", unrescored)
            int8_scores = np.array([h.score for h in raw])
            differs += not np.allclose(np.sort(int8_scores), np.sort(want_scores), atol=1e-5)
        assert differs, "no int8 copy was scanned: the scores without rescoring are the floats'"


def test_an_existing_store_is_planned_by_the_config_it_was_created_with(tmp_path: Path) -> None:
    old = HnswConfig(quantize=False, full_scan_kb=10_000)
    with EdgeNodeStore(tmp_path / "e", hnsw=old) as edge:
        edge.ensure_collection(DIM, MODEL)
    with EdgeNodeStore(tmp_path / "e") as edge:  # today's defaults: quantize, larger threshold
        edge.ensure_collection(DIM, MODEL)
        assert not edge.index.quantized
        assert edge.index.scan_points == 10_000 * 1024 // (DIM * 4)
    persisted = json.loads((tmp_path / "e" / "edge_config.json").read_text())
    assert persisted.get("quantization_config") is None
    client = RecordingClient()
    with QdrantNodeStore(client, "adrap", hnsw=old) as server:
        server.ensure_collection(DIM, MODEL)
    with QdrantNodeStore(client, "adrap", owns_client=True) as server:
        server.ensure_collection(DIM, MODEL)
        assert server.index == edge.index


def test_new_stores_get_the_configured_hnsw_graph(tmp_path: Path) -> None:
    graph = HnswConfig(m=20, ef_construct=50, full_scan_kb=300, indexing_kb=700)
    with EdgeNodeStore(tmp_path / "e", hnsw=graph) as edge:
        edge.ensure_collection(DIM, MODEL)
    persisted = json.loads((tmp_path / "e" / "edge_config.json").read_text())
    assert persisted["hnsw_config"]["m"] == 20
    assert persisted["hnsw_config"]["ef_construct"] == 50
    assert persisted["hnsw_config"]["full_scan_threshold"] == 300
    assert persisted["quantization_config"] == {"scalar": {"type": "int8", "always_ram": True}}
    with EdgeNodeStore(tmp_path / "d") as edge:
        edge.ensure_collection(DIM, MODEL)
        assert edge.index == HnswConfig().index_of(DIM)
    persisted = json.loads((tmp_path / "d" / "edge_config.json").read_text())
    assert persisted["hnsw_config"]["full_scan_threshold"] == HnswConfig().scan_kb(DIM)
    client = RecordingClient()
    with QdrantNodeStore(client, "adrap", owns_client=True, hnsw=graph) as server:
        server.ensure_collection(DIM, MODEL)
        server.create_next_generation(DIM, MODEL)
    for created in client.created:  # v1 and v2 alike
        assert created["hnsw_config"] == models.HnswConfigDiff(
            m=20, ef_construct=50, full_scan_threshold=300
        )
        assert created["optimizers_config"] == models.OptimizersConfigDiff(indexing_threshold=700)
        assert created["quantization_config"] == models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, always_ram=True)
        )
    assert len(client.created) == 2


def test_a_deferred_optimize_leaves_upserts_alone_until_the_owner_runs_it(tmp_path: Path) -> None:
    """The daemon keeps index builds (O(store), GIL held) off the update path: upsert no longer
    optimizes; optimize_due() says when enough of the store (and at least the threshold) waits."""
    nodes = [make_node(f"n{i}", n_tokens=10) for i in range(60)]
    with EdgeNodeStore(tmp_path / "s", auto_optimize_points=20) as store:
        store.ensure_collection(DIM, MODEL)
        ran: list[bool] = []
        optimize = store.optimize

        def counting() -> bool:
            ran.append(True)
            return optimize()

        store.optimize = counting  # type: ignore[method-assign]
        store.upsert(nodes[:30], unit_vectors(30))
        assert ran == [True], "not deferred: upsert optimizes past the threshold"
        store.defer_optimize()
        assert store.deferred_optimize_points == 20
        store.upsert(nodes[30:], unit_vectors(30, seed=2))
        assert ran == [True], "deferred: upsert leaves it to the owner"
        assert store.optimize_due()  # 60 unindexed (tiny stores are never indexed) >= 20
        store.deferred_optimize_points = 100
        assert not store.optimize_due()


def test_an_optimize_that_merged_segments_leaves_one_set_on_disk(tmp_path: Path) -> None:
    """The engine keeps the segments an optimize merged away until a flush: a store optimized
    again and again (a build, a long-running daemon) piled up a copy of itself per optimize
    (6.9 GB of segments in a 265k-leaf build). optimize() flushes when it rebuilt anything."""
    graph = HnswConfig(m=8, ef_construct=16, indexing_kb=32)  # 32 KB: 512 points of 16-d
    with EdgeNodeStore(tmp_path / "s", auto_optimize_points=None, hnsw=graph) as store:
        store.ensure_collection(DIM, MODEL)
        sizes = []
        for part in range(4):
            nodes = [make_node(f"p{part}-{i}") for i in range(1500)]
            store.upsert(nodes, unit_vectors(1500, seed=part))
            assert store.optimize()
            sizes.append(len(list((tmp_path / "s" / "segments").iterdir())))
        assert max(sizes) <= 2, f"segment folders after each optimize: {sizes}"
        hits = store.search(unit_vectors(1, seed=3)[0], SearchFilter(tree="t1"), 3)
        assert hits, "the store lost its points"
        assert hits[0].score > 0.99  # the last part's first vector is still found
