"""The dashboard's JSON endpoints and page on a daemon over a real built tree (qdrant-edge shard):
paging, limits, unknown ids, the token, the updates, and the exported page's data."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ingestor.pipeline import Pipeline
from ingestor.service.daemon import Daemon
from ingestor.service.dashboard import view as view_module
from ingestor.service.dashboard.export import export_data
from ingestor.service.dashboard.page import embed_json, render_page
from ingestor.service.dashboard.view import MAX_PAGE, TreeView
from ingestor.service.failures import Quarantine
from retriever import SearchFilter, point_id
from testkit.daemons import make_daemon
from tests.unit.tree.test_adrap import doc_text

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
Tree = tuple[Pipeline, Path]


@pytest.fixture
def daemon(tree: Tree, tmp_path: Path) -> Daemon:
    p, root = tree
    d = make_daemon(p, root, http_token=TOKEN, state_dir=tmp_path / "state")
    d.metrics.ready = True
    return d


@pytest.fixture
def client(daemon: Daemon) -> Iterator[TestClient]:
    with TestClient(daemon.app(), base_url="http://127.0.0.1:8765") as c:
        yield c


def get(client: TestClient, path: str, **params: Any) -> Any:
    resp = client.get(path, params=params, headers=AUTH)
    assert resp.status_code == 200, resp.text
    return resp.json()


def layer_ids(p: Pipeline, layer: int) -> list[str]:
    state = p.require_state()
    return sorted(i for i, n in state.nodes.items() if n.layer == layer)


def test_layers_count_every_layer_of_the_state_top_first(client: TestClient, tree: Tree) -> None:
    p, _ = tree
    counts = p.require_state().layer_counts()
    out = get(client, "/dashboard/api/layers")
    assert out["tree"] == "t"
    assert [(x["layer"], x["count"]) for x in out["layers"]] == sorted(counts.items())[::-1]
    assert len(out["layers"]) >= 2  # leaves and at least one layer of summaries


def test_a_layer_is_paged_by_offset_id_without_gaps_or_repeats(
    client: TestClient, tree: Tree
) -> None:
    p, _ = tree
    want = layer_ids(p, 0)
    assert len(want) > 7
    seen: list[str] = []
    offset = None
    pages = 0
    while True:
        page = get(client, "/dashboard/api/layer/0", limit=7, offset=offset)
        assert len(page["nodes"]) <= 7
        assert all(n["layer"] == 0 and n["kind"] == "chunk" for n in page["nodes"])
        seen += [n["node_id"] for n in page["nodes"]]
        pages += 1
        offset = page["next"]
        if offset is None:
            break
    assert seen == want  # id order, each once
    assert pages == -(-len(want) // 7)
    leaf = page["nodes"][-1] if page["nodes"] else None
    assert leaf is not None
    assert leaf["source"].endswith(".txt")
    assert leaf["char_end"] > leaf["char_start"] >= 0
    assert len(leaf["preview"]) <= view_module.PREVIEW_CHARS


def test_limits_are_enforced_with_400(client: TestClient) -> None:
    for params in ({"limit": MAX_PAGE + 1}, {"limit": 0}, {"limit": "ten"}, {"offset": "x"}):
        resp = client.get("/dashboard/api/layer/0", params=params, headers=AUTH)
        assert resp.status_code == 400, params
        assert "limit" in resp.json()["error"] or "offset" in resp.json()["error"]
    assert get(client, "/dashboard/api/layer/0", limit=MAX_PAGE)["layer"] == 0
    some = get(client, "/dashboard/api/layer/1")["nodes"][0]["node_id"]
    for params in ({"limit": MAX_PAGE + 1}, {"offset": "-1"}):
        resp = client.get(f"/dashboard/api/children/{some}", params=params, headers=AUTH)
        assert resp.status_code == 400, params


def test_a_node_shows_text_sources_parents_and_its_children_page_by_page(
    client: TestClient, tree: Tree
) -> None:
    p, _ = tree
    state = p.require_state()
    summary = max((n for n in state.nodes.values() if n.layer == 1), key=lambda n: len(n.children))
    out = get(client, f"/dashboard/api/node/{summary.node_id}")
    assert out["text"] == summary.text
    assert out["n_children"] == len(summary.children)
    assert [x["node_id"] for x in out["parents_preview"]] == summary.parents
    assert sorted(out["sources"]) == sorted(summary.sources)
    assert out["n_sources"] == len(summary.sources)

    got: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = get(client, f"/dashboard/api/children/{summary.node_id}", limit=2, offset=offset)
        assert page["total"] == len(summary.children)
        got += [c["node_id"] for c in page["nodes"]]
        offset = page["next"]
    assert got == summary.children

    leaf = state.nodes[summary.children[0]]
    out = get(client, f"/dashboard/api/node/{leaf.node_id}")
    assert (out["source"], out["char_start"], out["char_end"]) == (
        leaf.source,
        leaf.char_start,
        leaf.char_end,
    )
    assert summary.node_id in [x["node_id"] for x in out["parents_preview"]]


def test_a_node_lists_at_most_max_sources(
    client: TestClient, tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, _ = tree
    state = p.require_state()
    wide = max(state.nodes.values(), key=lambda n: len(n.sources))
    assert len(wide.sources) >= 2
    monkeypatch.setattr(view_module, "MAX_SOURCES", 1)
    out = get(client, f"/dashboard/api/node/{wide.node_id}")
    assert len(out["sources"]) == 1
    assert out["n_sources"] == len(wide.sources)
    assert "source_dirs" not in out


def test_unknown_malformed_and_other_trees_ids_are_404(client: TestClient, tree: Tree) -> None:
    p, _ = tree
    some = p.context.store.retrieve(layer_ids(p, 0)[:1])[0]
    other = some.model_copy(update={"tree": "t2", "node_id": point_id("t2/x")})
    p.context.store.upsert([other], p.context.store.retrieve_vectors([some.node_id]))
    for node_id in (point_id("nope"), "not-a-uuid", other.node_id):
        for path in (f"/dashboard/api/node/{node_id}", f"/dashboard/api/children/{node_id}"):
            resp = client.get(path, headers=AUTH)
            assert resp.status_code == 404, path
            assert "no node" in resp.json()["error"]
    assert client.get("/dashboard/api/layer/-1", headers=AUTH).status_code == 404


def test_the_data_needs_the_token_and_the_page_does_not(client: TestClient) -> None:
    for path in ("/dashboard/api/layers", "/dashboard/api/layer/0", "/dashboard/api/updates"):
        assert client.get(path).status_code == 401
        wrong = {"Authorization": "Bearer wrong"}
        assert client.get(path, headers=wrong).status_code == 401
    page = client.get("/dashboard")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "<script" in page.text
    assert "adrap-data" in page.text


def test_the_api_answers_503_while_the_daemon_reconciles(
    daemon: Daemon, client: TestClient
) -> None:
    daemon.metrics.ready = False
    resp = client.get("/dashboard/api/layers", headers=AUTH)
    assert resp.status_code == 503
    assert "reconciling" in resp.json()["error"]


def test_updates_list_what_each_update_changed_and_the_quarantine(
    daemon: Daemon, client: TestClient, tree: Tree
) -> None:
    p, root = tree
    assert get(client, "/dashboard/api/updates")["updates"] == []
    (root / "new.txt").write_text(doc_text(random.Random(5), 6))
    report = p.update([root / "new.txt"])
    daemon.metrics.applied(report, p.require_state())
    daemon.quarantine = daemon.api.quarantine = Quarantine(None)
    daemon.quarantine.add("bad.pdf", root / "bad.pdf", "the LLM refused it (400)")

    out = get(client, "/dashboard/api/updates")
    [last] = out["updates"]
    assert last["files_added"] == 1
    assert last["leaves_added"] == report.stats.leaves_added > 0
    for key in ("clusters_changed", "clusters_created", "clusters_split", "clusters_removed"):
        assert last[key] == getattr(report.stats, key)
    assert last["summaries_regenerated"] == report.stats.summaries_regenerated
    assert out["quarantined"]["bad.pdf"]["reason"].startswith("the LLM refused")


def test_the_updates_list_skipped_and_stale_files_with_their_reasons(
    daemon: Daemon, client: TestClient, tree: Tree
) -> None:
    p, root = tree
    (root / "blob.txt").write_bytes(b"\x00\x01" * 50)
    p.update([root / "blob.txt"])
    p.collector.unread.note(
        "sub/", "stale", "folder 'sub' cannot be listed now (EIO)", None, kept=True
    )
    out = get(client, "/dashboard/api/updates")["unread"]
    assert (out["skipped"], out["stale"]) == (1, 1)
    assert out["skipped_files"][0]["source"] == "blob.txt"
    assert "binary" in out["skipped_files"][0]["reason"]
    assert out["stale_files"][0]["source"] == "sub/"
    page = get(client, "/status", offset=1, limit=5)["unread"]
    assert page["offset"] == 1
    assert page["skipped_files"] == []  # one skipped file: the second page is empty
    assert client.get("/status", params={"offset": "-1"}, headers=AUTH).status_code == 400
    metrics = client.get("/metrics", headers=AUTH).text
    assert 'adrap_skipped_files{tree="t"} 1.0' in metrics
    assert 'adrap_stale_files{tree="t"} 1.0' in metrics


def test_the_query_the_page_runs_is_the_daemon_s_own(client: TestClient, daemon: Daemon) -> None:
    out = get(client, "/query", q="apple orchard harvest", max_tokens=300)
    direct = daemon.api.query({"q": "apple orchard harvest", "max_tokens": "300"})
    assert [h["node_id"] for h in out["hits"]] == [h["node_id"] for h in direct["hits"]]
    assert out["total_tokens"] <= 300


def test_export_embeds_top_layers_whole_then_children_up_to_the_cap(tree: Tree) -> None:
    p, _ = tree
    state = p.require_state()
    view = TreeView(p.context.store, "t")
    counts = state.layer_counts()
    top = max(counts)
    whole = export_data(view, max_nodes=10**6)
    assert not whole["truncated"]
    assert set(whole["nodes"]) == set(state.nodes)

    cap = counts[top] + 3
    part = export_data(view, max_nodes=cap)
    assert part["truncated"]
    assert len(part["nodes"]) == cap
    assert sorted(part["order"][str(top)]) == layer_ids(p, top)
    below = part["order"][str(top - 1)]
    assert len(below) == 3
    first_children = [c for i in part["order"][str(top)] for c in state.nodes[i].children]
    assert below == list(dict.fromkeys(first_children))[:3]
    embedded = {x["layer"]: x["embedded"] for x in part["layers"]}
    assert embedded[top] == counts[top]
    assert embedded[top - 1] == 3
    assert "of the tree's" in part["note"]
    assert "Search is off" in part["note"]
    assert p.context.store.count(SearchFilter(tree="t")) == len(state.nodes)


def test_the_exported_page_cannot_be_broken_out_of_by_document_text() -> None:
    evil = {"text": "</script><script>alert(1)</script><!--"}
    html = render_page({"nodes": {"x": evil}, "note": ""})
    blob = re.search(r'<script id="adrap-data" type="application/json">(.*?)</script>', html, re.S)
    assert blob is not None
    assert json.loads(blob.group(1)) == {"nodes": {"x": evil}, "note": ""}
    assert "</script><script>alert" not in html
    assert "<" not in embed_json(evil)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp is not None
    assert "connect-src 'none'" in csp.group(1)
    assert "connect-src 'self'" in render_page()
