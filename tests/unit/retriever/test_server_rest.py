"""The facade's reader over a Qdrant server's collection (retriever.facade.server): the reader filter
on every read, and the reads that could reach a hidden point refused (qdrant-client's local mode
stands in for the server; the daemon-level doors run in tests/unit/service/test_reader_doors.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from qdrant_client import QdrantClient
from qdrant_client.http import models

from retriever import QdrantNodeStore
from retriever.facade.server import ServerRestReader
from retriever.schema import META_POINT_ID
from tests.contracts.test_node_store import DIM, MODEL, make_node, unit_vectors

PUBLIC, HR = ("pub",), ("hr",)


@pytest.fixture
def reader() -> Iterator[tuple[ServerRestReader, list[str]]]:
    store = QdrantNodeStore(QdrantClient(":memory:"), "adrap", owns_client=True)
    store.ensure_collection(DIM, MODEL)
    classes = [PUBLIC, HR, ("hr", "pub"), PUBLIC]
    nodes = [
        make_node(f"n{i}", layer=int(i == 2)).model_copy(update={"access": c})
        for i, c in enumerate(classes)
    ]
    store.upsert(nodes, unit_vectors(4))
    yield ServerRestReader(store.client, "adrap"), [n.node_id for n in nodes]
    store.close()


def test_every_read_keeps_what_the_caller_may_read(
    reader: tuple[ServerRestReader, list[str]],
) -> None:
    r, ids = reader
    public = {ids[0], ids[3]}
    hostile = models.Filter(  # a should of its own cannot loosen the reader filter
        should=[models.FieldCondition(key="access", match=models.MatchAny(any=["hr"]))],
        must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key="nothing"))],
    )
    vec = unit_vectors(1, seed=3)[0].tolist()
    for flt in (None, hostile):
        got = r.query(models.QueryRequest(query=vec, filter=flt, limit=50), PUBLIC).points
        assert {str(p.id) for p in got} <= public | {META_POINT_ID}
        scrolled = r.scroll(models.ScrollRequest(filter=flt, limit=50), PUBLIC).points
        assert {str(p.id) for p in scrolled} - {META_POINT_ID} <= public
        counted = r.count(models.CountRequest(filter=flt), PUBLIC).count
        assert counted == len(scrolled)
        facet = r.facet(models.FacetRequest(key="access", filter=flt, exact=True), PUBLIC)
        held = Counter(a for p in scrolled for a in (p.payload or {}).get("access", ()))
        assert {str(h.value): h.count for h in facet.hits} == dict(held), (flt, facet)
        assert flt is not None or dict(held) == {"pub": 2}
    inner = models.Prefetch(query=vec, filter=hostile, limit=50)
    fused = r.query(
        models.QueryRequest(prefetch=[inner], query=models.FusionQuery(fusion="rrf"), limit=50),
        PUBLIC,
    ).points
    assert {str(p.id) for p in fused} <= public
    got = r.retrieve(models.PointRequest(ids=ids), PUBLIC)
    assert {str(p.id) for p in got} == public
    assert {str(p.id) for p in r.retrieve(models.PointRequest(ids=ids), None)} == set(ids)
    assert r.info(PUBLIC).points_count == len(public) + 1, "its points and the meta point"


def test_a_hidden_point_is_not_found_and_back_doors_are_refused(
    reader: tuple[ServerRestReader, list[str]],
) -> None:
    r, ids = reader
    with pytest.raises(LookupError, match="Not found"):
        r.query(models.QueryRequest(query=ids[1], limit=3), PUBLIC)
    with pytest.raises(LookupError, match="Not found"):
        r.query(
            models.QueryRequest(prefetch=[models.Prefetch(query=ids[2])], limit=3),
            PUBLIC,
        )
    assert r.query(models.QueryRequest(query=ids[0], limit=3), PUBLIC).points
    refused = [
        models.QueryRequest(
            query=models.RecommendQuery(recommend=models.RecommendInput(positive=[ids[1]]))
        ),
        models.QueryRequest(query=models.OrderByQuery(order_by="layer")),
        models.QueryRequest(query=ids[0], lookup_from=models.LookupLocation(collection="other")),
    ]
    for req in refused:
        with pytest.raises(ValueError, match="not supported by adrap's read-only Qdrant facade"):
            r.query(req, PUBLIC)
