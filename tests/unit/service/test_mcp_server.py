"""The MCP tools over a real qdrant-edge tree (fake embedder): in process, and at ``/mcp`` of the
daemon's real app (``build_app`` over ``daemon_routes``) behind its door and token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from ingestor.answer.service import QueryService
from ingestor.pipeline import Pipeline
from ingestor.service.daemon.routes import daemon_routes
from ingestor.service.http import HttpLimits, build_app
from ingestor.service.mcp_server import LocalRunner, TreeTools, build_server
from retriever import SearchFilter

TOKEN = "tok"
BASE = "http://127.0.0.1:8765"
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def service(tree: tuple[Pipeline, Path]) -> QueryService:
    p, _ = tree
    return QueryService(p.context.store, p.context.embedder, p.context.tree)


def calls(server: Any, *todo: tuple[str, dict[str, Any]]) -> list[Any]:
    """Results of ``todo`` through the SDK's client, connected in process."""
    from mcp import Client

    async def main() -> list[Any]:
        async with Client(server) as client:
            return [await client.call_tool(name, args) for name, args in todo]

    return anyio.run(main)


def test_search_hits_cite_their_place_and_read_node_walks_up_and_down(
    service: QueryService,
) -> None:
    tools = TreeTools(service)
    server = build_server(LocalRunner(lambda fn: fn(tools), timeout=30), with_ask=False)
    found, leaves = calls(
        server,
        ("search", {"query": "orchard harvest", "max_tokens": 400}),
        ("search", {"query": "orchard harvest", "max_layer": 0, "source": "d1.txt"}),
    )
    hits = found.structured_content["hits"]
    assert hits
    for hit in hits:
        assert hit["node_id"]
        assert isinstance(hit["score"], float)
        if hit["layer"] == 0:
            assert hit["file"].startswith("d")
            assert hit["span"][0] < hit["span"][1]
    assert {h["file"] for h in leaves.structured_content["hits"]} == {"d1.txt"}
    leaf = leaves.structured_content["hits"][0]
    (up,) = calls(server, ("read_node", {"node_id": leaf["node_id"]}))
    assert up.structured_content["node"]["text"] == leaf["text"]
    parent = up.structured_content["parents"][0]
    assert parent["layer"] == 1
    (down,) = calls(server, ("read_node", {"node_id": parent["node_id"]}))
    assert leaf["node_id"] in [c["node_id"] for c in down.structured_content["children"]]


def test_bad_arguments_come_back_as_tool_errors_naming_the_value(service: QueryService) -> None:
    tools = TreeTools(service)
    server = build_server(
        LocalRunner(lambda fn: fn(tools), timeout=30), with_ask=False, max_tokens=500
    )
    listed = calls(server, ("search", {"query": "x", "max_tokens": 501}))
    listed += calls(server, ("search", {"query": "x", "mode": "sideways"}))
    listed += calls(server, ("read_node", {"node_id": "not-a-uuid"}))
    texts = [r.content[0].text for r in listed]
    assert all(r.is_error for r in listed)
    assert "max_tokens must be at most 500, not 501" in texts[0]
    assert "'sideways'" in texts[1]
    assert "'not-a-uuid'" in texts[2]


def test_ask_is_listed_only_with_an_llm(service: QueryService) -> None:
    from mcp import Client

    async def names(with_ask: bool) -> tuple[list[str], str]:
        tools = TreeTools(service)
        server = build_server(LocalRunner(lambda fn: fn(tools), timeout=30), with_ask=with_ask)
        async with Client(server) as client:
            listed = await client.list_tools()
            return sorted(t.name for t in listed.tools), server.instructions or ""

    without, said = anyio.run(names, False)
    assert without == ["changes", "read_node", "search"]
    assert "ADRAP_SUMMARY__BACKEND=openai" in said
    assert anyio.run(names, True)[0] == ["ask", "changes", "read_node", "search"]


@pytest.fixture
def client(service: QueryService) -> Iterator[TestClient]:
    """The daemon's app with a token, ``/mcp`` over the tree's query service."""
    daemon = SimpleNamespace(
        queries=service,
        query=service.query,
        ask=service.ask,
        changes=lambda params, caller=None: {},
        feed=None,
        ready=True,
    )
    app = build_app(daemon_routes(daemon, HttpLimits()), TOKEN)  # type: ignore[arg-type]
    with TestClient(app, base_url=BASE) as c:
        yield c


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def test_http_mcp_answers_a_tool_call_with_the_token(client: TestClient) -> None:
    call = rpc("tools/call", {"name": "search", "arguments": {"query": "orchard harvest"}})
    got = client.post("/mcp", json=call, headers=ACCEPT | {"Authorization": f"Bearer {TOKEN}"})
    assert got.status_code == 200, got.text
    assert got.json()["result"]["structuredContent"]["hits"]


def test_http_mcp_refuses_no_token_a_cross_site_origin_and_a_foreign_host(
    client: TestClient,
) -> None:
    init = rpc(
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}},
    )
    bearer = ACCEPT | {"Authorization": f"Bearer {TOKEN}"}
    assert client.post("/mcp", json=init, headers=ACCEPT).status_code == 401
    cross = client.post("/mcp", json=init, headers=bearer | {"Origin": "https://evil.example"})
    assert cross.status_code == 403
    assert (
        client.post("/mcp", json=init, headers=bearer | {"Host": "evil.example"}).status_code == 403
    )
    assert client.post("/mcp", json=init, headers=bearer).status_code == 200


def test_read_node_never_returns_the_meta_point(service: QueryService) -> None:
    from retriever.schema import META_POINT_ID

    assert service.store.count(SearchFilter(tree=service.tree)) > 0
    with pytest.raises(ValueError, match="no node"):
        TreeTools(service).read_node(META_POINT_ID)


def test_a_search_with_no_hits_tells_the_agent_why(service: QueryService) -> None:
    """An agent that asked for 3 tokens got ``hits: []`` and nothing to act on."""
    tools = TreeTools(service)
    small = tools.search({"query": "apple orchard", "max_tokens": 3})
    assert small["hits"] == []
    assert small["note"].startswith("no node fits in 3 tokens")
    assert "max_tokens 250" in small["note"]
    assert "note" not in tools.search({"query": "apple orchard"})
    server = build_server(LocalRunner(lambda fn: fn(tools), timeout=30), with_ask=False)
    (said,) = calls(server, ("search", {"query": "apple orchard", "max_tokens": 3}))
    assert said.structured_content["note"] == small["note"]
