"""A reader whose query the planner scans is served from a copy of their points in memory
(retriever.reader_copy): the exact ranking of what they may read, kept by every write, never a
point they may not read, and the engine's own scan until the copy is complete."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

import retriever.reader_copy as reader_copy
from retriever import SearchFilter
from retriever.edge_store import EdgeNodeStore
from retriever.reader_copy import ReaderCopies
from retriever.schema import NodePayload
from retriever.validation import point_key
from testkit.spy import spy_found
from tests.contracts.test_node_store import MODEL, make_node

DIM = 16
CLASSES = [f"c{i}" for i in range(5)]
WORDS = ["ledger", "garden", "salary", "orbit", "harbour", "violin"]


def _vectors(n: int, rng: np.random.Generator) -> NDArray[np.float32]:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    out: NDArray[np.float32] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def _node(i: int, rng: random.Random) -> NodePayload:
    roll = rng.random()
    classes = () if roll < 0.1 else tuple(sorted(rng.sample(CLASSES, 1 + (roll > 0.7))))
    layer = int(rng.random() < 0.25)
    text = " ".join(rng.choices(WORDS, k=4)) + f" item{i}"
    node = make_node(f"n{i}", layer=layer, source=f"{rng.choice('ab')}/f{i}.md", text=text)
    return node.model_copy(update={"access": classes})


@pytest.fixture
def store(tmp_path: Path) -> EdgeNodeStore:
    s = EdgeNodeStore(tmp_path / "s")  # a small store: every reader's plan scans
    s.ensure_collection(DIM, MODEL)
    return s


@pytest.fixture
def served(store: EdgeNodeStore, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each reader's query was served from a copy."""
    return spy_found(monkeypatch, store.access_map.copies, "hits")


def _stored(
    store: EdgeNodeStore, n: int, seed: int
) -> tuple[
    random.Random, np.random.Generator, dict[str, NodePayload], dict[str, NDArray[np.float32]]
]:
    """``n`` random nodes written; the generators, and the nodes and vectors by id."""
    rng, vrng = random.Random(seed), np.random.default_rng(seed)
    nodes = [_node(i, rng) for i in range(n)]
    v = _vectors(n, vrng)
    store.upsert(nodes, v)
    vecs = {n.node_id: row for n, row in zip(nodes, v, strict=True)}
    return rng, vrng, {n.node_id: n for n in nodes}, vecs


def _fill(store: EdgeNodeStore) -> int:
    pages = 0
    while not store.fill_access_page(50):
        pages += 1
    return pages


def _exact(
    truth: dict[str, NodePayload],
    vecs: dict[str, NDArray[np.float32]],
    flt: SearchFilter,
    q: NDArray[np.float32],
    k: int,
) -> list[str]:
    may = [
        i
        for i, n in truth.items()
        if n.access
        and set(n.access) <= set(flt.readable or ())
        and (flt.max_layer is None or n.layer <= flt.max_layer)
        and (flt.source_prefix is None or any(s.startswith(flt.source_prefix) for s in n.sources))
    ]
    return sorted(may, key=lambda i: -float(vecs[i] @ q))[:k]


def test_a_readers_copy_is_the_exact_ranking_through_random_writes(
    store: EdgeNodeStore, served: list[bool]
) -> None:
    """After every step of 50 random writes (upserts, points written again with other classes or
    layers, access changes, deletions), each reader's dense hits equal the exact ranking of what
    they may read under their filter, served from their copy once it is filled."""
    rng, vrng, truth, vecs = _stored(store, 250, 7)
    filters = [
        SearchFilter(tree="t1", readable=("c0", "c1")),
        SearchFilter(tree="t1", readable=("c2",), max_layer=0),
        SearchFilter(tree="t1", readable=("c0", "c1", "c3"), source_prefix="a/"),
    ]
    q = _vectors(1, vrng)[0]
    for flt in filters:
        assert [h.node.node_id for h in store.search(q, flt, 10)] == _exact(truth, vecs, flt, q, 10)
    assert served == [False] * 3, "the engine's scan until a copy is filled"
    assert store.access_map.copies.wanted
    _fill(store)
    assert not store.access_map.copies.wanted
    next_id = len(truth)
    for _step in range(50):
        op = rng.random()
        if op < 0.45:
            again = [
                n.model_copy(update={"access": _node(0, rng).access, "layer": rng.randint(0, 1)})
                for n in rng.sample(sorted(truth.values(), key=lambda n: n.node_id), 3)
            ]
            fresh = [_node(next_id + j, rng) for j in range(rng.randint(1, 6))]
            next_id += len(fresh)
            batch = again + fresh
            bv = _vectors(len(batch), vrng)
            scale = vrng.uniform(0.2, 5.0, (len(batch), 1)).astype(np.float32)
            store.upsert(batch, bv * scale)  # the engine's cosine normalises what it stores
            for n, row in zip(batch, bv, strict=True):
                truth[n.node_id], vecs[n.node_id] = n, row
        elif op < 0.6:
            ids = rng.sample(sorted(truth), 8)
            classes = (rng.choice(CLASSES),)
            store.set_access({classes: ids})
            for i in ids:
                truth[i] = truth[i].model_copy(update={"access": classes})
        else:
            gone = rng.sample(sorted(truth), 4)
            store.delete(gone)
            for i in gone:
                truth.pop(i)
        _fill(store)  # copies dropped by an access change are made again
        q = _vectors(1, vrng)[0]
        for flt in filters:
            del served[:]
            for _ in range(2):  # the first may only ask for a copy again
                got = [h.node.node_id for h in store.search(q, flt, 10)]
                assert got == _exact(truth, vecs, flt, q, 10)
                _fill(store)
            assert served[-1], "the reader's scan was served from the copy"


def test_a_hybrid_query_fuses_the_copys_dense_hits_as_the_engines(
    store: EdgeNodeStore, served: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng, vrng, _, _ = _stored(store, 300, 3)
    flt = SearchFilter(tree="t1", readable=("c1", "c4"))
    store.search(_vectors(1, vrng)[0], flt, 5, text="ledger")
    _fill(store)
    for q, words in zip(
        _vectors(12, vrng), [" ".join(rng.sample(WORDS, 2)) for _ in range(12)], strict=True
    ):
        copied = [(h.node.node_id, round(h.score, 5)) for h in store.search(q, flt, 20, text=words)]
        assert served[-1]
        with monkeypatch.context() as m:
            m.setattr(store.access_map.copies, "hits", lambda *a, **k: None)
            engine = [
                (h.node.node_id, round(h.score, 5)) for h in store.search(q, flt, 20, text=words)
            ]
        assert [sc for _, sc in copied] == [sc for _, sc in engine]
        last = copied[-1][1]  # fused scores tie (RRF): a tie at the cut keeps any of its points
        assert [h for h in copied if h[1] > last] == [h for h in engine if h[1] > last]
        budget = store.search_budget(q, flt, 20, 60, text=words)
        assert budget
        assert all(set(h.node.access) <= {"c1", "c4"} for h in budget)


def test_a_reader_whose_plan_scans_fills_a_copy_and_not_the_access_map(
    store: EdgeNodeStore,
) -> None:
    """The access map serves only readers whose query walks; filling it for a reader whose
    query scans would hold every point's classes (~100 MB at 1M points) for nothing."""
    _, vrng, _, _ = _stored(store, 200, 6)
    store.search(_vectors(1, vrng)[0], SearchFilter(tree="t1", readable=("c3",)), 5)
    _fill(store)
    amap = store.access_map
    assert not amap.copies.wanted
    assert not amap.complete, "the map was not read"
    assert not amap.filling


def test_a_copy_past_its_bound_leaves_the_reader_to_the_engine(
    store: EdgeNodeStore, served: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_copy, "COPY_MAX_POINTS", 20)
    _, _, truth, vecs = _stored(store, 200, 4)
    small, big = (
        SearchFilter(tree="t1", readable=("c0",), source_prefix="a/", max_layer=0),
        SearchFilter(tree="t1", readable=tuple(CLASSES)),
    )
    q = next(iter(vecs.values()))
    for flt in (small, big):
        store.search(q, flt, 5)
    _fill(store)
    for flt in (small, big):
        assert [h.node.node_id for h in store.search(q, flt, 5)] == _exact(truth, vecs, flt, q, 5)
    assert served[-2:] == [True, False]
    assert not store.access_map.copies.wanted, "a copy too big is not asked for again"


def test_the_least_recently_asked_copies_go_past_the_memory_bound(
    store: EdgeNodeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, vrng, _, _ = _stored(store, 200, 5)
    q = _vectors(1, vrng)[0]
    first, second = (SearchFilter(tree="t1", readable=(c,)) for c in ("c0", "c1"))
    copies = store.access_map.copies
    store.search(q, first, 5)
    _fill(store)
    monkeypatch.setattr(reader_copy, "COPY_BYTES", copies._copies[first].nbytes + 1)
    store.search(q, second, 5)
    _fill(store)
    assert copies.hits(second, q, 5) is not None
    assert copies.hits(first, q, 5) is None, "the older copy was dropped (and is asked again)"


def test_a_copys_rows_move_as_points_leave() -> None:
    copies = ReaderCopies()
    flt = SearchFilter(tree="t1", readable=("c0",))
    copy = copies._copies[flt] = reader_copy._Copy()
    ids = [make_node(f"n{i}").node_id for i in range(300)]
    vrng = np.random.default_rng(0)
    v = _vectors(300, vrng)
    import uuid

    for i, row in zip(ids, v, strict=True):
        copy.put(uuid.UUID(i), row)
    copy.complete = True
    copies.drop([point_key(i) for i in ids[::3]])
    left = [i for j, i in enumerate(ids) if j % 3]
    q = v[1]
    got = [str(h.id) for h in copies.hits(flt, q, 300) or []]
    assert sorted(got) == sorted(left)
    assert got == sorted(left, key=lambda i: -float(v[ids.index(i)] @ q))
