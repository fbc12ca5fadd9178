"""/query and /ask say when nothing in the tree seems to answer (``no_match``), hits still shown."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from ingestor.answer.service import QueryService
from ingestor.pipeline import Pipeline
from ingestor.service.daemon import Daemon
from ingestor.service.deadline import BoundedLock
from testkit.daemons import make_daemon

Tree = tuple[Pipeline, Path]


def _client(tree: Tree, tmp_path: Path, min_score: float | None) -> tuple[Daemon, TestClient]:
    p, root = tree
    ctx = p.context
    queries = QueryService(
        ctx.store,
        ctx.embedder,
        ctx.tree,
        min_score=min_score,
        classes=ctx.access.registry,
        lock=BoundedLock("the query embedder"),
    )
    d = make_daemon(p, root, state_dir=tmp_path / "state", queries=queries)
    d.metrics.ready = True
    return d, TestClient(d.app(), base_url="http://127.0.0.1:8765")


def test_a_best_hit_below_the_threshold_is_no_match_with_its_hits(
    tree: Tree, tmp_path: Path
) -> None:
    _, client = _client(tree, tmp_path, min_score=0.999)
    with client:
        dense = client.get(
            "/query", params={"q": "apple orchard harvest zeppelin", "hybrid": "false"}
        ).json()
        out = client.get("/query", params={"q": "apple orchard harvest zeppelin"}).json()
        resp = client.post("/ask", params={"q": "apple orchard harvest zeppelin"})
        assert resp.status_code == 200, resp.text
        asked = resp.json()
    assert dense["no_match"] is True
    assert dense["hits"]
    assert dense["best_score"] == max(h["score"] for h in dense["hits"])  # cosine similarities
    # a hybrid ranking's scores are fused (DBSF, not similarities): its best dense match decides
    assert out["no_match"] is True
    assert out["best_score"] <= 1.0
    assert out["best_score"] == dense["best_score"]
    assert out["min_score"] == 0.999
    assert asked["no_match"] is True


def test_a_best_hit_above_the_threshold_or_no_threshold_is_a_match(
    tree: Tree, tmp_path: Path
) -> None:
    for min_score in (0.0, None):
        _, client = _client(tree, tmp_path, min_score=min_score)
        with client:
            out = client.get("/query", params={"q": "apple orchard harvest zeppelin"}).json()
        assert out["no_match"] is False
        assert out["min_score"] == min_score


def test_an_empty_context_says_why(tree: Tree, tmp_path: Path) -> None:
    """A budget smaller than every node, or a filter nothing matches, gave ``hits: []`` and no
    reason to an HTTP or MCP client (the CLI's text alone said it)."""
    _, client = _client(tree, tmp_path, min_score=None)
    with client:
        small = client.get("/query", params={"q": "apple orchard", "max_tokens": "3"}).json()
        none = client.get("/query", params={"q": "apple orchard", "source": "no/such/"}).json()
        fits = client.get("/query", params={"q": "apple orchard"}).json()
    assert small["hits"] == []
    assert small["note"].startswith("no node fits in 3 tokens"), small
    assert none["hits"] == []
    assert "matches this request's filter" in none["note"], none
    assert fits["hits"]
    assert "note" not in fits
