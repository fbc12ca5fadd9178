"""Who may read what at the doors that read the store themselves (issue 53): the Qdrant facade,
``/mcp`` and the dashboard's API, over the embedded store and over a Qdrant server's collection.

A real tree over a share with public files (mode 644) and a secret one under a folder only its
owner (another uid) and its group may traverse (0750), built with the hash embedder on a real
qdrant-edge shard, served by a real Daemon over real HTTP. The anonymous caller (no token) must
get no node it may not read through any door, whatever filter it sends; the owner's token still
reads everything; a named token for the folder's group reads the secret too. The meta point stays
readable to everyone.
"""

from __future__ import annotations

import asyncio
import grp
import json
import os
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse
from starlette.testclient import TestClient

from ingestor.pipeline import Pipeline
from ingestor.read.access_classes import ANONYMOUS
from ingestor.service.daemon import Daemon
from ingestor.service.http import HttpServer
from ingestor.service.identity import Callers, TokenBook
from retriever import F, QdrantNodeStore, SearchFilter
from retriever.schema import META_POINT_ID, META_TREE
from retriever.sparse import bm25_query
from testkit.daemons import make_daemon
from tests.unit.service.test_watcher import make_pipeline, write_corpus

SECRET = "zanzibarquokka"
OWNER = "the-owners-token"
TREE = "t"
BASE = "http://127.0.0.1:8765"
ACCEPT = {"Accept": "application/json, text/event-stream"}
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _group() -> grp.struct_group:
    """An existing group other than root's (a named token needs a principal the system knows)."""
    for name in ("users", "mail", "daemon"):
        try:
            return grp.getgrnam(name)
        except KeyError:
            continue
    pytest.skip("no group users, mail or daemon on this machine")


@dataclass
class Share:
    pipeline: Pipeline
    daemon: Daemon
    base: str
    group_token: str
    hidden: set[str]  # the nodes the anonymous caller may not read
    visible: set[str]  # those it may
    secret_leaves: list[str]
    secret_class: str
    public_leaf: str  # a leaf the anonymous caller reads, under a summary it may not

    def client(self, api_key: str | None = None) -> QdrantClient:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an api_key over http warns
            return QdrantClient(url=self.base, api_key=api_key, check_compatibility=False)


@pytest.fixture(scope="module", params=["embedded", "server"])
def share(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Share]:
    """The same share over the embedded store and over a Qdrant server's collection (the
    facade serves either; qdrant-client's local mode stands in for the server)."""
    tmp = tmp_path_factory.mktemp("doors")
    root = tmp / "share"
    write_corpus(root, 12)
    secret = root / "hr" / "pay.txt"
    secret.parent.mkdir()
    secret.write_text(
        f"The salary review of {SECRET} is confidential. Pay bands rise by seven percent. "
        f"Only {SECRET} and the board know the bonus pool.\n"
    )
    group = _group()
    for path in (secret.parent, secret):
        os.chown(path, 51001, group.gr_gid)
    os.chmod(secret.parent, 0o750)  # its owner and group may pass, nobody else
    os.chmod(secret, 0o644)  # its own mode says everyone: the folder decides
    server = None
    if request.param == "server":
        server = QdrantNodeStore(QdrantClient(":memory:"), "adrap", owns_client=True)
    p = make_pipeline(tmp, store=server)
    p.build(root)
    tokens = TokenBook(tmp / "tokens.json")
    group_token = tokens.add("hr", f"group:{group.gr_name}")
    # No http_token: a request without a token is the anonymous caller, not a 401.
    d = make_daemon(
        p,
        root,
        http_port=0,
        state_dir=tmp / "state",
        callers=Callers(owner_token=OWNER, tokens=tokens),
    )
    d.metrics.ready = True
    nodes, _ = p.context.store.scroll(SearchFilter(tree=TREE), 10_000)
    readable = set(p.context.access.registry.readable(ANONYMOUS) or ())
    hidden = {n.node_id for n in nodes if not n.access or not set(n.access) <= readable}
    leaves = [n for n in nodes if n.source == "hr/pay.txt"]
    assert leaves
    assert all(SECRET in n.text or n.node_id in hidden for n in leaves)
    public_leaf = next(
        n.node_id
        for n in nodes
        if n.layer == 0 and n.node_id not in hidden and set(n.parents) & hidden
    )
    assert {n.node_id for n in nodes if SECRET in n.text} <= hidden
    assert any(n.layer > 0 for n in nodes if n.node_id in hidden), "no blended summary"
    server = HttpServer(d.app(), "127.0.0.1", 0, d.limits)
    server.start()
    try:
        yield Share(
            pipeline=p,
            daemon=d,
            base="http://{}:{}".format(*server.address),
            group_token=group_token,
            hidden=hidden,
            visible={n.node_id for n in nodes} - hidden,
            secret_leaves=[n.node_id for n in leaves],
            secret_class=leaves[0].access[0],
            public_leaf=public_leaf,
        )
    finally:
        server.stop()
        p.context.store.close()


@pytest.fixture
def no_thread_leaks() -> None:
    """The module's server outlives each test by design (overrides the autouse guard)."""


def leaks(share: Share, points: list[Any]) -> list[str]:
    """The points among ``points`` the anonymous caller may not read, or that hold the secret."""
    return [
        str(p.id)
        for p in points
        if str(p.id) in share.hidden or SECRET in json.dumps(p.payload or {}) + str(p.vector)
    ]


def hostile(share: Share) -> list[models.Filter | None]:
    """Filters that try to widen what the reader filter lets through."""
    secret = share.secret_class
    ids: list[models.ExtendedPointId] = sorted(share.hidden)
    on_secret = models.FieldCondition(key=F.ACCESS, match=models.MatchAny(any=[secret]))
    only_secret = models.FieldCondition(
        key=F.ACCESS, match=models.MatchExcept(**{"except": [secret]})
    )
    in_tree = models.FieldCondition(key=F.TREE, match=models.MatchValue(value=TREE))
    return [
        None,
        models.Filter(should=[on_secret]),
        models.Filter(must_not=[only_secret]),
        models.Filter(must=[models.HasIdCondition(has_id=ids)]),
        models.Filter(should=[models.HasIdCondition(has_id=ids), in_tree]),
        models.Filter(
            min_should=models.MinShould(
                conditions=[on_secret, models.HasIdCondition(has_id=ids)], min_count=1
            )
        ),
        models.Filter(
            should=[
                models.IsEmptyCondition(is_empty=models.PayloadField(key=F.ACCESS)),
                models.FieldCondition(key=F.TEXT, match=models.MatchText(text=SECRET)),
                models.FieldCondition(key=F.SOURCE, match=models.MatchValue(value="hr/pay.txt")),
            ]
        ),
        models.Filter(must_not=[models.Filter(must=[only_secret])]),
        models.Filter(must_not=[in_tree], should=[in_tree, on_secret]),
    ]


# -- the Qdrant facade -------------------------------------------------------------------------


def test_the_facade_gives_the_anonymous_caller_no_hidden_node_whatever_its_filter(
    share: Share,
) -> None:
    anon = share.client()
    vec = share.pipeline.context.embedder.embed_query(f"salary review of {SECRET}").tolist()
    sparse = bm25_query(f"{SECRET} salary bonus")
    sv = models.SparseVector(indices=sparse.indices, values=sparse.values)
    for flt in hostile(share):
        got: list[Any] = []
        scrolled = anon.scroll("adrap", scroll_filter=flt, limit=10_000, with_payload=True)[0]
        got += scrolled
        assert anon.count("adrap", count_filter=flt, exact=True).count == len(scrolled)
        for key in (F.SOURCE, F.ACCESS):  # a facet counts what the caller may read, no more
            facet = anon.facet("adrap", key=key, facet_filter=flt, limit=1000, exact=True)
            values = {str(h.value) for h in facet.hits}
            assert "hr/pay.txt" not in values, (flt, facet)
            assert share.secret_class not in values, (flt, facet)
        by_source = anon.facet("adrap", key=F.SOURCE, facet_filter=flt, limit=1000, exact=True)
        shown = Counter(str((p.payload or {}).get(F.SOURCE)) for p in scrolled)
        assert {str(h.value): h.count for h in by_source.hits} == {
            s: n for s, n in shown.items() if s != "None"
        }, flt
        got += anon.query_points(
            "adrap", query=vec, query_filter=flt, limit=1000, with_payload=True, with_vectors=True
        ).points
        got += anon.query_points(
            "adrap",
            query=models.NearestQuery(nearest=vec, mmr=models.Mmr(diversity=0.3)),
            query_filter=flt,
            limit=50,
        ).points
        got += anon.query_points(
            "adrap", query=sv, using="bm25", query_filter=flt, limit=1000
        ).points
        for outer, inner in ((flt, None), (None, flt)):  # the prefetch's own filter too
            got += anon.query_points(
                "adrap",
                prefetch=[
                    models.Prefetch(query=vec, using="dense", filter=inner, limit=500),
                    models.Prefetch(
                        query=sv,
                        using="bm25",
                        filter=inner,
                        limit=500,
                        prefetch=[models.Prefetch(query=vec, filter=inner, limit=500)],
                    ),
                ],
                query=models.FusionQuery(fusion=models.Fusion.RRF),
                query_filter=outer,
                limit=1000,
                with_payload=True,
            ).points
        for answer in anon.query_batch_points(
            "adrap", [models.QueryRequest(query=vec, filter=flt, limit=1000, with_payload=True)]
        ):
            got += answer.points
        legacy = httpx.post(
            f"{share.base}/collections/adrap/points/search",
            json={
                "vector": vec,
                "filter": None
                if flt is None
                else flt.model_dump(mode="json", exclude_none=True, by_alias=True),
                "limit": 1000,
                "with_payload": True,
            },
            timeout=30,
        )
        assert legacy.status_code == 200, legacy.text
        got += [models.ScoredPoint(**p) for p in legacy.json()["result"]]
        assert leaks(share, got) == [], f"filter {flt} let hidden nodes through"
        assert {str(p.id) for p in scrolled} <= share.visible | {META_POINT_ID}
    # Not found: a hidden point by id, in a retrieve, a GET and as the query's point.
    assert anon.retrieve("adrap", share.secret_leaves + sorted(share.hidden)) == []
    for pid in share.secret_leaves:
        got_one = httpx.get(f"{share.base}/collections/adrap/points/{pid}", timeout=30)
        assert got_one.status_code == 404, got_one.text
        with pytest.raises(UnexpectedResponse) as missing:
            anon.query_points("adrap", query=pid, limit=5)
        assert missing.value.status_code == 404
        with pytest.raises(UnexpectedResponse):
            anon.query_points(
                "adrap",
                prefetch=[models.Prefetch(query=pid, limit=5)],
                query=models.FusionQuery(fusion=models.Fusion.RRF),
            )
    info = anon.get_collection("adrap")
    assert info.points_count is not None
    assert info.points_count <= len(share.visible) + 1


def test_the_meta_point_stays_readable_to_everyone(share: Share) -> None:
    anon = share.client()
    (meta,) = anon.retrieve("adrap", [META_POINT_ID])
    assert meta.payload is not None
    assert meta.payload["embed_model"]
    only_meta = models.Filter(
        must=[models.FieldCondition(key=F.TREE, match=models.MatchValue(value=META_TREE))]
    )
    scrolled = anon.scroll("adrap", scroll_filter=only_meta, limit=10)[0]
    assert [str(p.id) for p in scrolled] == [META_POINT_ID]
    got = httpx.get(f"{share.base}/collections/adrap/points/{META_POINT_ID}", timeout=30)
    assert got.status_code == 200, got.text


def test_the_owners_token_still_reads_every_point(share: Share) -> None:
    owner = share.client(OWNER)
    points = owner.scroll("adrap", limit=10_000, with_payload=True)[0]
    assert {str(p.id) for p in points} == share.hidden | share.visible | {META_POINT_ID}
    assert any(SECRET in json.dumps(p.payload) for p in points)
    assert len(owner.retrieve("adrap", share.secret_leaves)) == len(share.secret_leaves)
    assert owner.query_points("adrap", query=share.secret_leaves[0], limit=3).points


def test_a_caller_reads_through_the_facade_what_its_classes_allow(share: Share) -> None:
    """Wired to the registry: the anonymous caller reads the public nodes (not nothing), the
    folder's group reads the secret, and a hostile filter still gets it no further."""
    with TestClient(share.daemon.app(), base_url=BASE) as c:

        def scroll(headers: dict[str, str], flt: dict[str, Any] | None = None) -> set[str]:
            body = {"limit": 10_000, "with_payload": True, "filter": flt}
            got = c.post("/collections/adrap/points/scroll", json=body, headers=headers)
            assert got.status_code == 200, got.text
            points = got.json()["result"]["points"]
            return {str(p["id"]) for p in points if SECRET not in json.dumps(p)} | {
                f"secret:{p['id']}" for p in points if SECRET in json.dumps(p)
            }

        anonymous = scroll({})
        assert anonymous == share.visible | {META_POINT_ID}
        hostile_filter = {"should": [{"key": "access", "match": {"any": [share.secret_class]}}]}
        assert scroll({}, hostile_filter) <= share.visible | {META_POINT_ID}
        group = scroll({"api-key": share.group_token})
        assert any(i.startswith("secret:") for i in group), "the folder's group reads it"
        assert share.visible <= {i.removeprefix("secret:") for i in group}


# -- MCP ---------------------------------------------------------------------------------------


def rpc(name: str, arguments: dict[str, Any], n: int = 1) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def tool(c: Any, name: str, arguments: dict[str, Any], token: str | None = None) -> Any:
    headers = ACCEPT | ({"Authorization": f"Bearer {token}"} if token else {})
    got = c.post("/mcp", json=rpc(name, arguments), headers=headers)
    assert got.status_code == 200, got.text
    out = got.json()["result"]
    assert not out.get("isError") or name == "read_node", out
    return out


def test_mcp_runs_each_tool_as_the_requests_caller(share: Share) -> None:
    question = {"query": "salary review pay bands bonus pool", "max_tokens": 16_000}
    with TestClient(share.daemon.app(), base_url=BASE) as c:
        anon = tool(c, "search", question)["structuredContent"]
        assert anon["hits"] is not None
        assert SECRET not in json.dumps(anon)
        assert not {h["node_id"] for h in anon["hits"]} & share.hidden
        for mode in ("traversal", "postqfrap"):
            other = tool(c, "search", question | {"mode": mode})
            assert SECRET not in json.dumps(other)
        owner = tool(c, "search", question, OWNER)["structuredContent"]
        assert SECRET in json.dumps(owner), "the owner's token reads it"
        # read_node: a hidden node is not found; a hidden parent is left out.
        for pid in share.secret_leaves:
            hidden = tool(c, "read_node", {"node_id": pid})
            assert hidden["isError"]
            assert SECRET not in json.dumps(hidden)
            assert not tool(c, "read_node", {"node_id": pid}, OWNER).get("isError")
        seen = tool(c, "read_node", {"node_id": share.public_leaf})["structuredContent"]
        assert seen["node"]["node_id"] == share.public_leaf
        assert not {p["node_id"] for p in seen["parents"]} & share.hidden
        assert SECRET not in json.dumps(seen)
        full = tool(c, "read_node", {"node_id": share.public_leaf}, OWNER)["structuredContent"]
        assert {p["node_id"] for p in full["parents"]} & share.hidden


def test_mcp_callers_interleaved_each_get_their_own(share: Share) -> None:
    """The caller travels in a context variable: the SDK's stateless handling must run each
    tool in the context of its own request, also when requests overlap, over real HTTP and
    through the SDK's own client."""
    question = {"query": "salary review pay bands bonus pool", "max_tokens": 16_000}

    async def one(http: httpx.AsyncClient, n: int, token: str | None) -> bool:
        headers = ACCEPT | ({"Authorization": f"Bearer {token}"} if token else {})
        got = await http.post(f"{share.base}/mcp", json=rpc("search", question, n), headers=headers)
        assert got.status_code == 200, got.text
        return SECRET in got.text

    async def main() -> list[bool]:
        async with httpx.AsyncClient(timeout=60) as http:
            return await asyncio.gather(
                *(one(http, n, OWNER if n % 2 else None) for n in range(12))
            )

    saw = asyncio.run(main())
    assert saw == [bool(n % 2) for n in range(12)]

    async def sdk(token: str | None) -> str:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers) as http:
            transport = streamable_http_client(f"{share.base}/mcp", http_client=http)
            async with Client(transport) as client:
                result = await client.call_tool("search", question)
                return json.dumps(result.structured_content)

    assert SECRET not in asyncio.run(sdk(None))
    assert SECRET in asyncio.run(sdk(OWNER))


# -- the dashboard -----------------------------------------------------------------------------


def dashboard(c: TestClient, path: str, token: str | None = None, **params: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    got = c.get(path, params=params, headers=headers)
    return got.status_code, got.json() if got.status_code < 500 else got.text


def dashboard_ids(c: TestClient, token: str | None = None) -> tuple[set[str], str]:
    """Every node id and text the dashboard's API shows a caller: layers, pages, nodes with their
    parents and children, the picture."""
    import base64
    import uuid

    seen: set[str] = set()
    text: list[str] = []
    code, layers = dashboard(c, "/dashboard/api/layers", token)
    assert code == 200
    for entry in layers["layers"]:
        offset = None
        while True:
            code, page = dashboard(
                c, f"/dashboard/api/layer/{entry['layer']}", token, limit=200, offset=offset
            )
            assert code == 200
            seen |= {n[F.NODE_ID] for n in page["nodes"]}
            text.append(json.dumps(page))
            offset = page["next"]
            if offset is None:
                break
    for node_id in sorted(seen):
        code, node = dashboard(c, f"/dashboard/api/node/{node_id}", token)
        assert code == 200
        seen |= set(node[F.PARENTS]) | set(node[F.CHILDREN])
        seen |= {p[F.NODE_ID] for p in node["parents_preview"]}
        code, kids = dashboard(c, f"/dashboard/api/children/{node_id}", token, limit=200)
        assert code == 200
        seen |= {n[F.NODE_ID] for n in kids["nodes"]}
        text += [json.dumps(node), json.dumps(kids)]
    code, picture = dashboard(c, "/dashboard/api/picture", token)
    assert code == 200
    raw = base64.b64decode(picture["ids"])
    seen |= {str(uuid.UUID(bytes=raw[i : i + 16])) for i in range(0, len(raw), 16)}
    text.append(json.dumps(picture))
    return seen, "\n".join(text)


def test_the_dashboard_shows_the_anonymous_caller_no_hidden_node(share: Share) -> None:
    with TestClient(share.daemon.app(), base_url=BASE) as c:
        seen, text = dashboard_ids(c)
        assert not seen & share.hidden
        assert SECRET not in text
        assert "hr/pay.txt" not in text
        for pid in share.secret_leaves:
            assert dashboard(c, f"/dashboard/api/node/{pid}")[0] == 404
            assert dashboard(c, f"/dashboard/api/children/{pid}")[0] == 404
        code, updates = dashboard(c, "/dashboard/api/updates")
        assert code == 200
        assert updates["updates"] == []
        assert "hr/pay.txt" not in json.dumps(updates)
        assert "root" not in updates
        owner_seen, owner_text = dashboard_ids(c, OWNER)
        assert owner_seen >= share.hidden | share.visible
        assert SECRET in owner_text
        assert dashboard(c, f"/dashboard/api/node/{share.secret_leaves[0]}", OWNER)[0] == 200


def test_the_dashboard_shows_a_caller_what_its_classes_allow(share: Share) -> None:
    with TestClient(share.daemon.app(), base_url=BASE) as c:
        seen, text = dashboard_ids(c)
        assert seen == share.visible, "the anonymous caller sees every public node, no other"
        assert SECRET not in text
        code, layers = dashboard(c, "/dashboard/api/layers")
        assert sum(e["count"] for e in layers["layers"]) == len(share.visible)
        code, node = dashboard(c, f"/dashboard/api/node/{share.public_leaf}")
        assert code == 200
        assert not set(node[F.PARENTS]) & share.hidden
        group_seen, group_text = dashboard_ids(c, share.group_token)
        assert SECRET in group_text
        assert set(share.secret_leaves) <= group_seen
        code, updates = dashboard(c, "/dashboard/api/updates", share.group_token)
        assert updates["updates"] == []
        assert updates["caller"]["unrestricted"] is False


def test_the_dashboard_updates_keep_file_names_for_the_owner(share: Share) -> None:
    with TestClient(share.daemon.app(), base_url=BASE) as c:
        code, updates = dashboard(c, "/dashboard/api/updates", OWNER)
        assert code == 200
        assert "root" in updates
        assert updates["caller"]["unrestricted"]


def test_the_reader_filter_is_read_per_request(share: Share) -> None:
    """A caller's classes are asked for on every request (a chmod applies at once): the facade
    and the dashboard call ``readable`` each time."""
    calls: list[object] = []
    classes = share.daemon.queries.classes

    def counting(who: Any) -> Any:
        calls.append(who)
        return classes.readable(who)

    from ingestor.service.daemon.app import facade_reader
    from ingestor.service.dashboard.routes import dashboard_routes
    from ingestor.service.dashboard.view import TreeView
    from ingestor.service.http import build_app
    from ingestor.service.qdrant_rest import qdrant_routes

    d = share.daemon
    routes = [
        *dashboard_routes(TreeView(d.store, TREE), d.api.dashboard_updates, readable=counting),
        *qdrant_routes(
            facade_reader(d.store, "adrap"),
            root=d.root,
            limits=d.limits,
            ready=lambda: True,
            readable=counting,
        ),
    ]
    with TestClient(build_app(routes, None, callers=d.callers), base_url=BASE) as c:
        for _ in range(2):
            assert c.post("/collections/adrap/points/count", json={}).status_code == 200
            assert c.get("/dashboard/api/layers").status_code == 200
    assert len(calls) == 4
    assert all(who == ANONYMOUS for who in calls)


# -- the change log ------------------------------------------------------------------------------


def test_changes_show_each_caller_what_they_may_read(share: Share) -> None:
    with TestClient(share.daemon.app(), base_url=BASE) as c:

        def changes(token: str | None = None, **params: str) -> dict[str, Any]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            got = c.get("/changes", params={"since": "1d", **params}, headers=headers)
            assert got.status_code == 200, got.text
            out: dict[str, Any] = got.json()
            return out

        def files(out: dict[str, Any]) -> set[str]:
            return {f["source"] for r in out["records"] for f in r["files"]}

        owner = changes(OWNER, digest="1")
        assert [r["kind"] for r in owner["records"]] == ["build"]
        assert "hr/pay.txt" in files(owner)
        assert owner["records"][0]["leaves_added"] > 0
        assert owner["digest"]["parts"], "the owner's digest reads the summaries"
        anon = changes(digest="1")
        assert files(anon), "the public files are listed"
        assert "hr/pay.txt" not in json.dumps(anon)
        assert SECRET not in json.dumps(anon)
        named = {s["node_id"] for r in anon["records"] for s in r["summaries"]}
        assert named, "the summaries over public files only are listed"
        assert not named & share.hidden
        assert not {p["node_id"] for p in anon["digest"]["parts"]} & share.hidden
        assert "leaves_added" not in anon["records"][0]  # a count would tell of the hidden file
        assert "hr/pay.txt" in files(changes(share.group_token))
        assert c.get("/changes", params={"digest": "llm"}).status_code == 405  # POST only
        bad = c.get("/changes", params={"since": "last tuesday"})
        assert bad.status_code == 400
        assert "90m" in bad.text  # the forms it takes
        mcp = tool(c, "changes", {"since": "1d", "digest": True})["structuredContent"]
        assert files(mcp) == files(anon)
        assert SECRET not in json.dumps(mcp)
        assert "hr/pay.txt" in files(
            tool(c, "changes", {"since": "1d"}, OWNER)["structuredContent"]
        )
        board = c.get("/dashboard/api/updates").json()  # the dashboard's list, anonymous
        assert files({"records": board["changes"]}) == files(anon)
        owners = c.get("/dashboard/api/updates", headers={"Authorization": f"Bearer {OWNER}"})
        assert "hr/pay.txt" in files({"records": owners.json()["changes"]})
