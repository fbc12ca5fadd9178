"""The daemon's read-only Qdrant REST facade, read by the real qdrant-client over real HTTP.

A tree is built on a real qdrant-edge shard (hash embedder, echo summaries), a real Daemon serves
it, and ``QdrantClient(url=...)`` reads it. Filters and queries are checked against qdrant-client's
own local mode holding the same points: two implementations of Qdrant's semantics must agree.
"""

from __future__ import annotations

import importlib.metadata
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from qdrant_client import QdrantClient, models
from qdrant_client.common.version_check import get_server_version, is_compatible
from qdrant_client.http.exceptions import UnexpectedResponse

from ingestor.pipeline import Pipeline
from ingestor.service.daemon import Daemon
from retriever import F, SearchFilter
from retriever.schema import META_POINT_ID
from retriever.search import candidate_limit
from testkit.daemons import make_daemon
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline, write_corpus

TOKEN = "s3cret"
TREE = "t"


@dataclass
class Served:
    pipeline: Pipeline
    daemon: Daemon
    root: Path
    base: str
    dim: int

    def client(self, api_key: str = TOKEN) -> QdrantClient:
        """A real QdrantClient on the daemon's port (api_key over http warns: asserted).

        Its version check runs in a thread of its own, which could outlive the daemon; the check
        itself is tested with qdrant-client's own function.
        """
        with pytest.warns(UserWarning, match="insecure connection"):
            return QdrantClient(url=self.base, api_key=api_key, check_compatibility=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("rest")
    root = tmp / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp)
    p.build(root)
    d = make_daemon(p, root, http_port=0, http_token=TOKEN)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,), name="test-daemon")
    t.start()
    try:
        wait_until(lambda: d.metrics.ready and d.address is not None, 60)
        assert d.address is not None
        dim = p.context.embedder.dim
        yield Served(p, d, root.resolve(), "http://{}:{}".format(*d.address), dim)
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()


@pytest.fixture
def no_thread_leaks() -> None:
    """The module's daemon outlives each test by design (overrides the autouse guard)."""


def call(
    url: str,
    body: object = None,
    *,
    method: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, Any, dict[str, str]]:
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"))
    req.add_header("content-type", "application/json")
    for k, v in ({"api-key": TOKEN} if headers is None else headers).items():
        req.add_header(k, v)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null"), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        text = exc.read()
        return exc.code, json.loads(text) if text else None, dict(exc.headers)


def fill_ids(hits: list[models.ScoredPoint], budget: int, *, plain: bool = False) -> list[Any]:
    """docs/clients.md's recipe's fill: a summary only as the best hit of at most a quarter of
    ``budget``, the rest in score order
    while the token total fits ``budget``, then adrap's rule: summaries whose children make up
    ≥ 30 % of their children in the context are left out and the fill runs again. ``plain``
    (a query of summaries only): the fill alone."""

    def fill(points: list[models.ScoredPoint]) -> list[models.ScoredPoint]:
        taken, total = [], 0
        for hit in points:
            assert hit.payload is not None
            total += hit.payload[F.N_TOKENS]
            if total > budget:
                break
            taken.append(hit)
        return taken

    if plain:
        return [h.id for h in fill(hits)]
    hits = [
        h
        for i, h in enumerate(hits)
        if not (h.payload or {}).get(F.CHILDREN)
        or (i == 0 and (h.payload or {})[F.N_TOKENS] <= budget / 4)
    ]
    taken, dropped = fill(hits), set()
    while True:
        ids = {str(h.id) for h in taken}
        more = {
            h.id
            for h in taken
            if h.payload
            and (c := h.payload[F.CHILDREN])
            and sum(i in ids for i in c) >= 0.3 * len(c)
        }
        if not more:
            return [h.id for h in taken]
        dropped |= more
        taken = fill([h for h in hits if h.id not in dropped])


def tree_filter() -> models.Filter:
    return models.Filter(
        must=[models.FieldCondition(key=F.TREE, match=models.MatchValue(value=TREE))]
    )


# -- the collapsed-tree query ------------------------------------------------------------------


@pytest.mark.parametrize("question", ["orchard cider harvest", "court judge contract"])
def test_the_collapsed_tree_query_through_the_client_gives_the_nodes_of_the_daemons_query(
    served: Served, question: str
) -> None:
    """docs/clients.md's recipe (one filtered query, then the token fill) equals ``/query``."""
    budget = 300
    vector = served.pipeline.context.embedder.embed_query(question).tolist()
    hits = (
        served.client()
        .query_points(
            "adrap",
            query=vector,
            using="dense",
            limit=candidate_limit(budget),
            with_payload=True,
            query_filter=tree_filter(),
        )
        .points
    )
    ids = fill_ids(hits, budget)
    expected = served.daemon.api.query(
        {"q": question, "max_tokens": str(budget), "hybrid": "false"}
    )
    assert ids == [h[F.NODE_ID] for h in expected["hits"]]
    assert len(ids) >= 3


def test_a_leaves_only_query_on_the_leaf_vector_gives_the_daemons_leaves(served: Served) -> None:
    """Leaves carry their vector twice: ``using="leaf"`` searches the leaves alone, no layer
    filter needed; summaries have no ``leaf`` vector (their second one is ``summary``)."""
    question, budget = "orchard cider harvest", 300
    vector = served.pipeline.context.embedder.embed_query(question).tolist()
    client = served.client()
    hits = client.query_points(
        "adrap", query=vector, using="leaf", limit=50, query_filter=tree_filter()
    ).points
    assert hits
    assert all(h.payload is not None and h.payload[F.LAYER] == 0 for h in hits)
    leaves = served.pipeline.context.store.count(SearchFilter(tree=TREE, max_layer=0))
    assert len(hits) == min(50, leaves)
    ids = fill_ids(hits, budget)
    expected = served.daemon.api.query(
        {"q": question, "max_tokens": str(budget), "max_layer": "0", "hybrid": "false"}
    )
    assert ids == [h[F.NODE_ID] for h in expected["hits"]]
    upper = models.Filter(must=[models.FieldCondition(key=F.LAYER, range=models.Range(gte=1))])
    summary = client.scroll("adrap", scroll_filter=upper, limit=1, with_vectors=True)[0][0]
    assert isinstance(summary.vector, dict)
    assert set(summary.vector) == {"dense", "summary", "bm25"}


def test_a_summaries_only_query_on_the_summary_vector_gives_the_daemons_summaries(
    served: Served,
) -> None:
    """Summaries carry their vector twice too: ``using="summary"`` searches the summaries alone."""
    question, budget = "orchard cider harvest", 300
    vector = served.pipeline.context.embedder.embed_query(question).tolist()
    hits = (
        served.client()
        .query_points("adrap", query=vector, using="summary", limit=50, query_filter=tree_filter())
        .points
    )
    assert hits
    assert all(h.payload is not None and h.payload[F.LAYER] >= 1 for h in hits)
    summaries = served.pipeline.context.store.count(SearchFilter(tree=TREE, min_layer=1))
    assert len(hits) == min(50, summaries)
    expected = served.daemon.api.query(
        {"q": question, "max_tokens": str(budget), "min_layer": "1", "hybrid": "false"}
    )
    assert fill_ids(hits, budget, plain=True) == [h[F.NODE_ID] for h in expected["hits"]]
    code, body, _ = call(
        f"{served.base}/collections/adrap/points/query",
        {"query": vector, "using": "sparse", "limit": 1},
    )
    assert code == 400
    assert "'dense', 'leaf', 'summary', 'bm25'" in body["status"]["error"]


def test_query_by_point_id_is_nearest_to_that_point_without_it(served: Served) -> None:
    first = served.client().scroll("adrap", scroll_filter=tree_filter(), limit=1)[0][0]
    got = served.client().query_points("adrap", query=first.id, limit=3, with_payload=False)
    assert len(got.points) == 3
    assert first.id not in [p.id for p in got.points]
    assert got.points[0].payload is None


# -- scroll, retrieve, count, info -------------------------------------------------------------


def test_scroll_retrieve_count_and_info_describe_the_store(served: Served) -> None:
    client = served.client()
    store = served.pipeline.context.store
    seen: list[str] = []
    offset: Any = None
    while True:
        page, offset = client.scroll("adrap", limit=7, offset=offset, with_payload=False)
        assert all(p.payload is None for p in page)
        seen.extend(str(p.id) for p in page)
        if offset is None:
            break
    assert sorted(seen) == sorted([*store.iter_ids(TREE), META_POINT_ID])
    info = client.get_collection("adrap")
    assert info.points_count == len(seen)
    assert info.config.params.vectors == {
        name: models.VectorParams(size=served.dim, distance=models.Distance.COSINE)
        for name in ("dense", "leaf", "summary")
    }
    assert info.config.params.sparse_vectors == {
        "bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)
    }
    assert set(info.payload_schema) >= {F.TREE, F.LAYER}
    assert client.count("adrap").count == len(seen)
    upper = models.Filter(must=[models.FieldCondition(key=F.LAYER, range=models.Range(gte=1))])
    assert client.count("adrap", count_filter=upper).count == store.count(
        SearchFilter(tree=TREE, min_layer=1)
    )
    got = client.retrieve("adrap", [seen[3], seen[1], "00000000-0000-0000-0000-000000000000"])
    assert sorted(str(r.id) for r in got) == sorted([seen[1], seen[3]])
    code, body, _ = call(f"{served.base}/collections/adrap/points/{seen[1]}")
    assert code == 200
    assert body["status"] == "ok"
    assert body["result"]["id"] == seen[1]
    assert len(body["result"]["vector"]["dense"]) == served.dim
    assert call(f"{served.base}/collections/adrap/points/{seen[1][:-1]}0")[0] == 404
    assert client.collection_exists("adrap")
    assert not client.collection_exists("other")
    assert [c.name for c in client.get_collections().collections] == ["adrap"]


# -- the same semantics as qdrant-client's local mode ------------------------------------------


@pytest.fixture(scope="module")
def local(served: Served) -> QdrantClient:
    """qdrant-client's local mode holding the very points the facade serves."""
    with pytest.warns(UserWarning, match="insecure connection"):
        remote = QdrantClient(url=served.base, api_key=TOKEN)
    points, _ = remote.scroll("adrap", limit=10_000, with_vectors=True)
    mem = QdrantClient(":memory:")
    dim = served.dim
    mem.create_collection(
        "adrap",
        {
            n: models.VectorParams(size=dim, distance=models.Distance.COSINE)
            for n in ("dense", "leaf", "summary")
        },
        sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )
    mem.upsert(
        "adrap",
        [models.PointStruct(id=p.id, vector=p.vector, payload=p.payload) for p in points],  # type: ignore[arg-type]
    )
    return mem


def _filters(ids: list[str]) -> list[models.Filter]:
    fc, mv = models.FieldCondition, models.MatchValue
    return [
        models.Filter(must=[fc(key=F.KIND, match=mv(value="summary"))]),
        models.Filter(must_not=[fc(key=F.LAYER, match=mv(value=0))]),
        models.Filter(
            should=[
                fc(key=F.SOURCE, match=mv(value="d1.txt")),
                fc(key=F.SOURCE, match=mv(value="d2.txt")),
            ]
        ),
        models.Filter(
            min_should=models.MinShould(
                conditions=[
                    fc(key=F.SOURCES, match=mv(value="d1.txt")),
                    fc(key=F.LAYER, range=models.Range(gte=1)),
                ],
                min_count=2,
            )
        ),
        models.Filter(must=[fc(key=F.SOURCES, match=models.MatchAny(any=["d3.txt", "d4.txt"]))]),
        models.Filter(must=[fc(key=F.SOURCE, match=models.MatchExcept(**{"except": ["d0.txt"]}))]),
        models.Filter(must=[models.HasIdCondition(has_id=list[models.ExtendedPointId](ids[:5]))]),
        models.Filter(must=[models.IsEmptyCondition(is_empty=models.PayloadField(key=F.CHILDREN))]),
        models.Filter(must=[models.IsNullCondition(is_null=models.PayloadField(key=F.SUMMARIZER))]),
        models.Filter(must=[fc(key=F.PARENTS, values_count=models.ValuesCount(gte=2))]),
        models.Filter(must=[fc(key=F.N_TOKENS, range=models.Range(gt=20, lte=40))]),
        models.Filter(
            must=[models.Filter(should=[fc(key=F.LAYER, match=mv(value=1))]), tree_filter()]
        ),
        models.Filter(must=[fc(key=F.TEXT, match=models.MatchText(text="orchard"))]),
    ]


def test_filters_count_scroll_and_query_like_qdrant_client_local_mode(
    served: Served, local: QdrantClient
) -> None:
    client = served.client()
    ids = sorted(str(p.id) for p in local.scroll("adrap", limit=10_000)[0])
    vector = served.pipeline.context.embedder.embed_query("orchard harvest rocket").tolist()
    nonzero = 0
    for flt in _filters(ids):
        n = local.count("adrap", count_filter=flt).count
        assert client.count("adrap", count_filter=flt).count == n, flt
        nonzero += n > 0
        page = [str(p.id) for p in client.scroll("adrap", scroll_filter=flt, limit=100)[0]]
        assert page == [str(p.id) for p in local.scroll("adrap", scroll_filter=flt, limit=100)[0]]
        for offset in (0, 2):
            kwargs: dict[str, Any] = {"query_filter": flt, "limit": 5, "offset": offset}
            got = client.query_points("adrap", query=vector, using="dense", **kwargs).points
            want = local.query_points("adrap", query=vector, using="dense", **kwargs).points
            assert [str(p.id) for p in got] == [str(p.id) for p in want], flt
            assert [p.score for p in got] == pytest.approx([p.score for p in want], abs=1e-5)
    assert nonzero >= 10  # the filters select something


def test_payload_and_vector_selectors_and_score_threshold(served: Served) -> None:
    client = served.client()
    vector = served.pipeline.context.embedder.embed_query("orchard").tolist()
    kw: dict[str, Any] = {"query": vector, "query_filter": tree_filter(), "limit": 10}
    best = client.query_points("adrap", **kw).points
    cut = (best[2].score + best[3].score) / 2
    assert len(client.query_points("adrap", score_threshold=cut, **kw).points) == 3
    only = client.query_points("adrap", with_payload=[F.LAYER], with_vectors=True, **kw).points[0]
    assert set(only.payload or {}) == {F.LAYER}
    assert isinstance(only.vector, dict)
    assert len(only.vector["dense"]) == served.dim  # type: ignore[arg-type]
    sel = models.PayloadSelectorExclude(exclude=[F.TEXT])
    rest = client.query_points("adrap", with_payload=sel, **kw).points[0]
    assert F.TEXT not in (rest.payload or {})
    assert F.NODE_ID in (rest.payload or {})
    code, body, _ = call(
        f"{served.base}/collections/adrap/points/search",
        {
            "vector": {"name": "dense", "vector": vector},
            "limit": 4,
            "filter": tree_filter().model_dump(exclude_none=True),
        },
    )
    assert code == 200
    assert [p["id"] for p in body["result"]] == [str(p.id) for p in best[:4]]
    assert "payload" not in body["result"][0] or body["result"][0]["payload"] is None


# -- refusals ----------------------------------------------------------------------------------


def test_every_write_gets_403_saying_adrap_owns_the_collection(served: Served) -> None:
    client = served.client()
    before = client.count("adrap").count
    dim = served.dim
    writes: list[Callable[[], object]] = [
        lambda: client.upsert("adrap", [models.PointStruct(id=1, vector={"dense": [0.1] * dim})]),
        lambda: client.delete("adrap", points_selector=models.PointIdsList(points=[META_POINT_ID])),
        lambda: client.set_payload("adrap", payload={"x": 1}, points=[META_POINT_ID]),
        lambda: client.delete_collection("adrap"),
        lambda: client.create_collection(
            "new", {"dense": models.VectorParams(size=3, distance=models.Distance.DOT)}
        ),
        lambda: client.create_payload_index("adrap", "x", models.PayloadSchemaType.KEYWORD),
        lambda: client.update_collection_aliases(
            [
                models.CreateAliasOperation(
                    create_alias=models.CreateAlias(collection_name="adrap", alias_name="a")
                )
            ]
        ),
        lambda: client.create_snapshot("adrap"),
    ]
    for write in writes:
        with pytest.raises(UnexpectedResponse) as info:
            write()
        assert info.value.status_code == 403
        assert b"adrap owns the collection" in info.value.content
        assert str(served.root).encode() in info.value.content
    assert client.count("adrap").count == before


def test_unknown_collection_is_404_bad_input_400_and_unserved_reads_501(served: Served) -> None:
    client = served.client()
    with pytest.raises(UnexpectedResponse) as info:
        client.get_collection("nope")
    assert info.value.status_code == 404
    base = f"{served.base}/collections/adrap/points"
    code, body, _ = call(
        f"{served.base}/collections/nope/points/query", {"query": [0.1], "limit": 1}
    )
    assert (code, body["status"]["error"]) == (404, "Not found: Collection `nope` doesn't exist!")
    assert call(base + "/query", raw=b"{not json")[0] == 400
    code, body, _ = call(base + "/query", {"query": [0.1, 0.2], "limit": 1})
    assert code == 400
    assert "Vector dimension error" in body["status"]["error"]
    code, body, _ = call(base + "/query", {"query": [0.1], "using": "sparse"})
    assert (code, "Not existing vector name" in body["status"]["error"]) == (400, True)
    code, body, _ = call(base + "/query", {"query": {"order_by": "layer"}, "limit": 3})
    assert code == 400
    assert "OrderByQuery is not supported" in body["status"]["error"]
    assert call(base + "/query", {"limit": 20_000})[0] == 400
    assert call(base, {"ids": ["not-a-uuid"]})[0] == 400
    assert call(base + "/recommend", {"positive": [META_POINT_ID]})[0] == 501


def test_reads_wait_for_reconciliation_like_query(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp_path)
    d = make_daemon(p, root, http_port=0)
    d.start_http()  # serving, not yet reconciled
    try:
        assert d.address is not None
        base = "http://{}:{}".format(*d.address)
        code, body, _ = call(base + "/collections", headers={})
        assert code == 503
        assert "reconciling" in body["status"]["error"]
    finally:
        d.stop_http()
        p.context.store.close()


# -- auth and the root -------------------------------------------------------------------------


def test_the_token_is_taken_as_bearer_or_api_key_and_required(served: Served) -> None:
    url = served.base + "/collections"
    assert call(url, headers={})[0] == 401
    assert call(url, headers={"api-key": "wrong"})[0] == 401
    assert call(url, headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    assert call(url, headers={"api-key": TOKEN})[0] == 200
    with pytest.raises(UnexpectedResponse) as info:
        served.client(api_key="wrong").get_collections()
    assert info.value.status_code == 401


def test_root_reports_a_version_the_client_accepts_and_redirects_browsers(served: Served) -> None:
    code, body, _ = call(served.base + "/")
    assert code == 200
    assert body["title"] == "qdrant - vector search engine"
    client_version = importlib.metadata.version("qdrant-client")
    assert is_compatible(client_version, body["version"])
    # What QdrantClient(check_compatibility=True) runs in its thread:
    server_version = get_server_version(served.base, {"api-key": TOKEN}, None, 10)
    assert server_version == body["version"]
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    code, _, headers = call(served.base + "/", headers={"Accept": browser})  # a browser: no token
    assert (code, headers["location"]) == (307, "/dashboard")
    assert call(served.base + "/", headers={})[0] == 200, "open, as Qdrant's own root is"
    curl = {"api-key": TOKEN, "Accept": "*/*"}
    assert call(served.base + "/", headers=curl)[0] == 200


def test_a_kept_alive_connection_is_answered_without_the_delayed_ack_stall(served: Served) -> None:
    """Replies were held ~40 ms each (Nagle + delayed ACK: the socket lacked TCP_NODELAY):
    every connection the server accepted has TCP_NODELAY set."""
    assert served.daemon.server is not None
    connections = served.daemon.server.server.server_state.connections
    with httpx.Client(base_url=served.base, headers={"api-key": TOKEN}) as client:  # keep-alive
        for _ in range(3):
            assert client.post("/collections/adrap/points/count", json={}).status_code == 200
        sockets = [c.transport.get_extra_info("socket") for c in list(connections)]  # type: ignore[union-attr]
        # read while the connection is kept alive: once the client closes, the server may too
        assert sockets, "the kept-alive connection is open"
        assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets)


# -- hybrid queries, MMR, the meta point -------------------------------------------------------


def same_ranking(got: list[models.ScoredPoint], want: list[models.ScoredPoint]) -> None:
    """Same scores in the same order, and the same ids for each score (a tie, such as two
    nodes at the same rank of different prefetches under RRF, may come in either order)."""
    assert [p.score for p in got] == pytest.approx([p.score for p in want], abs=1e-5)
    groups: dict[float, tuple[set[str], set[str]]] = {}
    for g, w in zip(got, want, strict=True):
        key = round(w.score, 5)
        groups.setdefault(key, (set(), set()))
        groups[key][0].add(str(g.id))
        groups[key][1].add(str(w.id))
    last = round(want[-1].score, 5) if want else None
    for key, (a, b) in groups.items():
        if key != last:  # the last group may be cut by the limit differently
            assert a == b


def test_sparse_and_mmr_queries_answer_like_qdrant_client_local_mode(
    served: Served, local: QdrantClient
) -> None:
    from retriever.sparse import bm25_query

    client = served.client()
    sparse = bm25_query("orchard cider harvest court")
    query = models.SparseVector(indices=sparse.indices, values=sparse.values)
    kwargs: dict[str, Any] = {"using": "bm25", "limit": 10, "query_filter": tree_filter()}
    got = client.query_points("adrap", query=query, **kwargs).points
    same_ranking(got, local.query_points("adrap", query=query, **kwargs).points)
    assert got
    vector = served.pipeline.context.embedder.embed_query("orchard cider harvest").tolist()
    for mmr in (models.Mmr(), models.Mmr(diversity=0.9, candidates_limit=40)):
        nearest = models.NearestQuery(nearest=vector, mmr=mmr)
        kwargs = {"using": "dense", "limit": 8, "query_filter": tree_filter()}
        got = client.query_points("adrap", query=nearest, **kwargs).points
        want = local.query_points("adrap", query=nearest, **kwargs).points
        assert [str(p.id) for p in got] == [str(p.id) for p in want], mmr
    plain = client.query_points("adrap", query=vector, limit=8, query_filter=tree_filter())
    assert [p.id for p in got] != [p.id for p in plain.points]  # diverse, not the nearest 8


def test_the_hybrid_recipe_through_the_client_gives_the_nodes_of_the_daemons_query(
    served: Served,
) -> None:
    """One Query API request (docs/clients.md's hybrid recipe: dense and BM25 prefetch with the
    tree filter, DBSF, ``candidate_limit`` hits each), then the token fill, equals the
    daemon's ``/query`` (hybrid by default)."""
    from retriever.sparse import bm25_query

    budget = 300
    for question in ("orchard cider harvest", "court judge contract"):
        vector = served.pipeline.context.embedder.embed_query(question).tolist()
        sparse = bm25_query(question)
        limit = candidate_limit(budget)
        hits = (
            served.client()
            .query_points(
                "adrap",
                prefetch=[
                    models.Prefetch(query=vector, using="dense", filter=tree_filter(), limit=limit),
                    models.Prefetch(
                        query=models.SparseVector(indices=sparse.indices, values=sparse.values),
                        using="bm25",
                        filter=tree_filter(),
                        limit=limit,
                    ),
                ],
                query=models.FusionQuery(fusion=models.Fusion.DBSF),
                query_filter=tree_filter(),
                limit=limit,
                with_payload=True,
            )
            .points
        )
        ids = fill_ids(hits, budget)
        expected = served.daemon.api.query({"q": question, "max_tokens": str(budget)})
        assert ids == [h[F.NODE_ID] for h in expected["hits"]]
        dense = (
            served.client()
            .query_points(
                "adrap", query=vector, using="dense", query_filter=tree_filter(), limit=limit
            )
            .points
        )
        assert [h.id for h in hits] != [h.id for h in dense]  # the fusion ranks differently


def test_no_search_without_a_tree_filter_returns_the_meta_point(served: Served) -> None:
    from retriever.sparse import bm25_query

    client = served.client()
    e0 = [1.0] + [0.0] * (served.dim - 1)  # the meta point's vector in stores written before
    hits = client.query_points("adrap", query=e0, using="dense", limit=10_000).points
    assert META_POINT_ID not in {str(p.id) for p in hits}
    assert len(hits) == served.pipeline.context.store.count(SearchFilter(tree=TREE))
    sparse = bm25_query("orchard the a")
    query = models.SparseVector(indices=sparse.indices, values=sparse.values)
    hits = client.query_points("adrap", query=query, using="bm25", limit=10_000).points
    assert META_POINT_ID not in {str(p.id) for p in hits}
    assert client.retrieve("adrap", [META_POINT_ID])  # still there, for its payload


def test_the_reported_version_keeps_the_js_client_a_minor_behind_quiet() -> None:
    """The JS client's rule (major equal, minors within one), for @qdrant/js-client-rest one
    minor behind the installed qdrant-client, and for that client itself."""
    from ingestor.service.qdrant_rest import api_version

    def js_compatible(client: str, server: str) -> bool:
        (cmaj, cmin), (smaj, smin) = (tuple(map(int, v.split(".")[:2])) for v in (client, server))
        return cmaj == smaj and abs(cmin - smin) <= 1

    major, minor = map(int, importlib.metadata.version("qdrant-client").split(".")[:2])
    for client in (f"{major}.{minor - 2}.0", f"{major}.{minor - 1}.0", f"{major}.{minor}.0"):
        assert js_compatible(client, api_version()), client
        assert is_compatible(client, api_version()), client


def test_a_qdrant_bm25_document_query_is_the_bm25_vector_of_its_text(served: Served) -> None:
    """What docs/clients.md's JS and curl recipes send: the facade embeds it as a server's
    ``qdrant/bm25`` inference would (the engine's encoder), any other model is refused."""
    from retriever.sparse import bm25_query

    client = served.client()
    base = f"{served.base}/collections/adrap/points/query"
    question = "orchard cider harvest"
    sparse = bm25_query(question)
    by_vector = client.query_points(
        "adrap",
        query=models.SparseVector(indices=sparse.indices, values=sparse.values),
        using="bm25",
        limit=10,
    ).points
    code, body, _ = call(
        base,
        {"query": {"text": question, "model": "qdrant/bm25"}, "using": "bm25", "limit": 10},
    )
    assert code == 200
    assert [p["id"] for p in body["result"]["points"]] == [str(p.id) for p in by_vector]
    assert by_vector
    code, body, _ = call(
        base, {"query": {"text": question, "model": "sentence-transformers/x"}, "using": "bm25"}
    )
    assert code == 400
    assert "qdrant/bm25" in body["status"]["error"]
