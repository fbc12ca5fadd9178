"""The MCP SDK's own client reads a real tree (real model, real qdrant-edge) over stdio and HTTP.

``adrap mcp`` (stdio) over a tree built by ``adrap build``, and ``/mcp`` on a running ``adrap
watch`` with a token: both list the same tools, and ``search`` returns the node ids of ``adrap
query --json``, each hit citable (node id, file, span, layer, score). The HTTP endpoint refuses
a request without the token and a cross-site one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.integration.test_daemon import SAMPLE, Watch, watching

pytestmark = pytest.mark.integration
TOKEN = "mcp-test-token"
QUESTION = "What did Lincoln say about the nation?"


def environment(state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
    return env | {"ADRAP_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1"} | extra


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree built by ``adrap build`` over the sample folder (no daemon): its state dir."""
    tmp = tmp_path_factory.mktemp("mcp-built")
    shutil.copytree(SAMPLE, tmp / "docs")
    state = tmp / "state"
    out = subprocess.run(
        [sys.executable, "-m", "ingestor", "build", str(tmp / "docs")],
        capture_output=True,
        text=True,
        env=environment(state),
        cwd=tmp,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return state


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watch]:
    tmp = tmp_path_factory.mktemp("mcp-daemon")
    shutil.copytree(SAMPLE, tmp / "docs")
    with watching(tmp / "docs", tmp / "state", {"ADRAP_WATCH__HTTP_TOKEN": TOKEN}) as w:
        w.wait_ready()
        yield w
        assert w.stop() == 0


def stdio(state: Path, **extra: str) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "ingestor", "mcp"],
        env=environment(state, **extra),
        cwd=str(state.parent),
    )


def session(
    server: Any, calls: list[tuple[str, dict[str, Any]]], token: str | None = None
) -> dict[str, Any]:
    """Connect with the SDK's client (``server``: stdio parameters, or the URL of a streamable
    HTTP endpoint that needs ``token``), list the tools, make ``calls``; return what came back."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> dict[str, Any]:
        async with contextlib.AsyncExitStack() as stack:
            if token is not None:
                headers = {"Authorization": f"Bearer {token}"}
                http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers))
                server_ = streamable_http_client(server, http_client=http)
            else:
                server_ = server
            return await calls_on(await stack.enter_async_context(Client(server_)))

    async def calls_on(client: Any) -> dict[str, Any]:
        tools = await client.list_tools()
        out: dict[str, Any] = {"tools": sorted(t.name for t in tools.tools), "calls": []}
        for name, args in calls:
            result = await client.call_tool(name, args)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            out["calls"].append((result.is_error, result.structured_content, text))
        if calls and not out["calls"][0][0] and "hits" in out["calls"][0][1]:  # a search
            hit = out["calls"][0][1]["hits"][0]
            node = await client.call_tool("read_node", {"node_id": hit["node_id"]})
            out["node"] = node.structured_content
        return out

    return anyio.run(main)


def assert_citable(hits: list[dict[str, Any]]) -> None:
    assert hits
    for hit in hits:
        assert isinstance(hit["score"], float)
        assert hit["node_id"]
        assert hit["text"]
        assert hit["layer"] >= 0
        if hit["layer"] == 0:
            assert hit["file"] in {p.name for p in SAMPLE.iterdir()}
            start, end = hit["span"]
            assert 0 <= start < end
        else:
            assert hit["kind"] == "summary"
            assert hit["sources"]


def test_stdio_searches_filters_and_reads_nodes_of_a_built_tree(built: Path) -> None:
    got = session(
        stdio(built),
        [
            ("search", {"query": QUESTION, "max_tokens": 2000}),
            ("search", {"query": QUESTION, "source": "gettysburg-address.txt", "max_layer": 0}),
            ("search", {"query": QUESTION, "min_layer": 1}),
            ("search", {"query": QUESTION, "mode": "traversal", "top_k": 2}),
            ("read_node", {"node_id": "befaac65-63df-57d6-96eb-ff8abb19f16a"}),  # the meta point
            ("search", {"query": QUESTION, "mode": "sideways"}),
            ("changes", {"since": "1d", "digest": True}),
        ],
    )
    assert got["tools"] == ["changes", "read_node", "search"]  # no LLM configured: no ask
    failed, changes, _ = got["calls"][6]  # the tree's change log, read over stdio
    assert not failed
    assert [r["kind"] for r in changes["records"]] == ["build"]
    assert "gettysburg-address.txt" in {f["source"] for f in changes["records"][0]["files"]}
    assert changes["digest"]["parts"]
    (_, full, _), (_, one_file, _), (_, upper, _), (_, traversal, _) = got["calls"][:4]
    assert [h["node_id"] for h in full["hits"]] == adrap_query(built, QUESTION)
    for result in (full, one_file, upper, traversal):
        assert_citable(result["hits"])
    assert {h["file"] for h in one_file["hits"]} == {"gettysburg-address.txt"}
    assert all(h["layer"] >= 1 for h in upper["hits"])
    assert traversal["mode"] == "traversal"
    meta_error, bad_mode = got["calls"][4], got["calls"][5]
    assert meta_error[0]
    assert "no node" in meta_error[2]
    assert bad_mode[0]
    assert "'sideways'" in bad_mode[2]
    assert "collapsed" in bad_mode[2]
    node = got["node"]
    hit = full["hits"][0]
    assert node["node"]["node_id"] == hit["node_id"]
    assert node["node"]["text"] == hit["text"]
    if hit["layer"] == 0:
        assert node["parents"]
        assert not node["children"]
        assert all(p["layer"] == 1 and p["preview"] for p in node["parents"])
    else:
        assert node["children"]


def adrap_query(state: Path, question: str, **extra: str) -> list[str]:
    """Node ids of ``adrap query --json --max-tokens 2000`` on the tree in ``state`` (answered
    by the daemon when one owns it)."""
    out = subprocess.run(
        [sys.executable, "-m", "ingestor", "query", question, "--json", "--max-tokens", "2000"],
        capture_output=True,
        text=True,
        env=environment(state, **extra),
        cwd=state.parent,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return [h["node_id"] for h in json.loads(out.stdout)["hits"]]


def test_http_on_the_daemons_port_answers_with_the_token(daemon: Watch) -> None:
    got = session(f"{daemon.base}/mcp", [("search", {"query": QUESTION})], TOKEN)
    assert got["tools"] == ["changes", "read_node", "search"]
    is_error, result, text = got["calls"][0]
    assert not is_error, text
    want = adrap_query(daemon.state, QUESTION, ADRAP_WATCH__HTTP_TOKEN=TOKEN)
    assert [h["node_id"] for h in result["hits"]] == want
    assert_citable(result["hits"])
    assert got["node"]["node"]["node_id"] == result["hits"][0]["node_id"]


def test_stdio_forwards_to_the_daemon_that_owns_the_tree(daemon: Watch) -> None:
    got = session(
        stdio(daemon.state, ADRAP_WATCH__HTTP_TOKEN=TOKEN), [("search", {"query": QUESTION})]
    )
    is_error, result, text = got["calls"][0]
    assert not is_error, text
    want = adrap_query(daemon.state, QUESTION, ADRAP_WATCH__HTTP_TOKEN=TOKEN)
    assert [h["node_id"] for h in result["hits"]] == want


def test_http_refuses_without_the_token_and_across_sites(daemon: Watch) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    url = f"{daemon.base}/mcp"
    with httpx.Client(timeout=30) as http:
        assert http.post(url, json=init, headers=accept).status_code == 401
        wrong = accept | {"Authorization": "Bearer nope"}
        assert http.post(url, json=init, headers=wrong).status_code == 401
        cross = accept | bearer | {"Origin": "https://evil.example"}
        refused = http.post(url, json=init, headers=cross)
        assert refused.status_code == 403
        assert "cross-site" in refused.json()["error"]
        rebound = http.post(url, json=init, headers=accept | bearer | {"Host": "evil.example"})
        assert rebound.status_code == 403
        ok = http.post(url, json=init, headers=accept | bearer)  # the same request, let in
        assert ok.status_code == 200, ok.text
        assert ok.json()["result"]["serverInfo"]["name"] == "adrap"


@pytest.mark.slow
def test_ask_is_listed_with_an_llm_and_answers_citing_files(built: Path, llm_server: Any) -> None:
    """With a real local OpenAI-compatible server (SmolLM2), ``ask`` answers with citations."""
    env = {
        "ADRAP_SUMMARY__BACKEND": "openai",
        "ADRAP_SUMMARY__OPENAI__BASE_URL": llm_server.base_url,
        "ADRAP_SUMMARY__OPENAI__MODEL": llm_server.model,
        "ADRAP_ANSWER__MAX_TOKENS": "32",
    }
    question = {"question": QUESTION, "max_tokens": 600}
    got = session(stdio(built, **env), [("ask", question)])
    assert got["tools"] == ["ask", "changes", "read_node", "search"]
    is_error, result, text = got["calls"][0]
    assert not is_error, text
    assert result["answered"]
    assert result["answer"]
    assert result["model"] == llm_server.model
    assert result["parts"]
    assert all(s["source"] for p in result["parts"] for s in p["spans"])
