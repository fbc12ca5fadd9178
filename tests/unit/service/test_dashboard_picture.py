"""The dashboard's picture of the tree on a real built tree (qdrant-edge shard): icicle sizes,
colours by folder, the compact format, the 2-D map, the last update marked, the token, the cache."""

from __future__ import annotations

import base64
import gzip
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from ingestor.pipeline import Pipeline
from ingestor.service import metrics as metrics_module
from ingestor.service.daemon import Daemon
from ingestor.service.dashboard import picture as picture_module
from ingestor.service.dashboard.picture import (
    Layout,
    Link,
    Touched,
    lay_out,
    picture_json,
    read_nodes,
    top_folders,
)
from ingestor.service.dashboard.pictures import GRID, project
from testkit.daemons import make_daemon
from tests.unit.service.test_watcher import make_pipeline
from tests.unit.tree.test_adrap import doc_text

TOKEN = "picture-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Files of the tree, in folders under one shared folder ``notes/``.
FILES = (
    "notes/alpha/a0.txt",
    "notes/alpha/a1.txt",
    "notes/alpha/deep/a2.txt",
    "notes/alpha/a3.txt",
    "notes/beta/b0.txt",
    "notes/beta/b1.txt",
    "notes/gamma/g0.txt",
    "notes/top.txt",
)
Built = tuple[Pipeline, Path]


@pytest.fixture
def foldered(tmp_path: Path) -> Iterator[Built]:
    root = tmp_path / "docs"
    rng = random.Random(3)
    for name in FILES:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(doc_text(rng, rng.randint(4, 8)))
    p = make_pipeline(tmp_path)
    p.build(root)
    yield p, root.resolve()
    p.context.store.close()


@pytest.fixture
def nodes(foldered: Built) -> list[Link]:
    return read_nodes(foldered[0].context.store, "t")


def decode(out: dict[str, Any], key: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(out[key]), dtype=dtype)


def leaves_below(node: Link, by_id: dict[str, Link]) -> set[str]:
    """Every leaf reachable from ``node`` through its children (all of them)."""
    if node.layer == 0:
        return {node.node_id}
    return set().union(*(leaves_below(by_id[c], by_id) for c in node.children))


def test_top_folders_strip_the_shared_prefix() -> None:
    got = top_folders(["a/x/1.md", "a/y/2.md", "a/3.md", "a/x/z/4.md"])
    assert got == (["x", "y", "", "x"], "a/")
    assert top_folders(["1.md", "d/2.md"]) == (["", "d"], "")
    assert top_folders(["d/e/1.md", "d/e/2.md"]) == (["", ""], "d/e/")


def test_each_summary_spans_exactly_the_leaves_under_it(nodes: list[Link]) -> None:
    by_id = {n.node_id: n for n in nodes}
    lay = lay_out(nodes)
    assert len(lay.ids) == len(nodes)
    pos = {i: k for k, i in enumerate(lay.ids)}
    start, count = lay.layer_range(0)
    assert (start, count) == (0, lay.width)
    assert lay.width == sum(n.layer == 0 for n in nodes) > 10
    assert list(lay.x0[:count]) == list(range(count))  # leaves left to right, one unit each
    assert set(lay.size[:count]) == {1}
    summaries = [n for n in nodes if n.layer > 0]
    assert len({n.layer for n in summaries}) >= 1
    for s in summaries:
        k = pos[s.node_id]
        span = set(lay.ids[lay.x0[k] : lay.x0[k] + lay.size[k]])  # the leaves drawn under it
        below = leaves_below(s, by_id)
        assert span <= below, s.node_id
        if all(len(by_id[leaf].parents) <= 1 for leaf in below):
            assert lay.size[k] == len(below)  # one parent each: every leaf under it, once
    # bands line up: in every layer the nodes tile the leaves without overlap
    for entry in lay.layers:
        a, c = entry["start"], entry["count"]
        ends = lay.x0[a : a + c] + lay.size[a : a + c]
        assert all(lay.x0[a + 1 : a + c] >= ends[:-1])
    top = lay.layers[-1]
    a, c = top["start"], top["count"]
    roots = [n for n in nodes if not n.parents]
    assert sum(lay.size[pos[r.node_id]] for r in roots) == lay.width


def test_colours_are_the_top_folder_below_the_shared_one(nodes: list[Link]) -> None:
    lay = lay_out(nodes)
    assert lay.under == "notes/"
    names = [f["name"] for f in lay.folders]
    want = Counter(
        {"alpha": 0, "beta": 0, "gamma": 0, "": 0}
        | Counter(
            ({"alpha": "alpha", "beta": "beta", "gamma": "gamma"}.get(n.source.split("/")[1], ""))
            for n in nodes
            if n.layer == 0 and n.source
        )
    )
    assert sorted(names) == sorted(want)
    assert [f["leaves"] for f in lay.folders] == sorted(want.values(), reverse=True)
    by_id = {n.node_id: n for n in nodes}
    for k in range(lay.width):
        source = by_id[lay.ids[k]].source or ""
        part = source.split("/")[1] if source.count("/") > 1 else ""
        assert names[lay.folder[k]] == part
    for k in range(lay.width, len(lay.ids)):  # a summary: its leaves' most common folder
        under = Counter(lay.folder[lay.x0[k] : lay.x0[k] + lay.size[k]].tolist())
        if not under:
            continue
        best = max(under.values())
        assert under[lay.folder[k]] == best
        assert lay.purity[k] == round(255 * best / lay.size[k])


def test_folders_past_the_legend_share_one_colour(
    nodes: list[Link], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(picture_module, "LEGEND", 2)
    lay = lay_out(nodes)
    assert len(lay.folders) == 3
    assert lay.folders[-1]["name"] == picture_module.OTHER
    assert sum(f["leaves"] for f in lay.folders) == lay.width
    assert set(lay.folder[: lay.width].tolist()) == {0, 1, 2}


def test_the_picture_is_compact_arrays_without_texts(nodes: list[Link], foldered: Built) -> None:
    lay = lay_out(nodes)
    out = picture_json(lay, "t", "v1", Touched(None, "none"))
    n, w = out["n"], out["width"]
    ids = base64.b64decode(out["ids"])
    assert len(ids) == 16 * n
    assert [str(uuid.UUID(bytes=ids[16 * k : 16 * k + 16])) for k in range(n)] == lay.ids
    assert decode(out, "x0", "<i4").tolist() == lay.x0[w:].tolist()
    assert decode(out, "size", "<i4").tolist() == lay.size[w:].tolist()
    assert decode(out, "folder", "u1").tolist() == lay.folder.tolist()
    assert decode(out, "purity", "u1").tolist() == lay.purity[w:].tolist()
    assert len(decode(out, "touched", "<i4")) == 0
    text = str(out)
    texts = [n.text for n in foldered[0].require_state().nodes.values()]
    assert len(texts) == n
    assert not any(t[:40] in text for t in texts)  # no node text travels
    # ~16 bytes of id + ~10 of arrays per node, base64'd: far below one JSON object per node
    assert len(text) < 40 * n + 2000


def test_touched_are_the_nodes_written_since_the_update_began(nodes: list[Link]) -> None:
    lay = lay_out(nodes)
    stamps = sorted({float(t) for t in lay.updated_at})
    since = stamps[len(stamps) // 2]
    out = picture_json(lay, "t", "v", Touched(since, "half"))
    got = decode(out, "touched", "<i4").tolist()
    assert got == [k for k, t in enumerate(lay.updated_at) if t >= since]
    assert 0 < len(got) < len(lay.ids)


def test_the_map_separates_two_groups_and_fills_the_grid() -> None:
    rng = np.random.default_rng(1)
    centre = rng.standard_normal(32).astype(np.float32)
    a = centre + 0.05 * rng.standard_normal((50, 32)).astype(np.float32)
    b = -centre + 0.05 * rng.standard_normal((70, 32)).astype(np.float32)
    xy, share = project(np.vstack([a, b]))
    assert xy.shape == (120, 2)
    assert share[0] > 0.5  # the first axis is the gap between the groups
    xa, xb = xy[:50, 0].astype(int), xy[50:, 0].astype(int)
    assert xa.max() < xb.min() or xb.max() < xa.min()
    assert int(xy.max()) == GRID
    assert project(np.vstack([a, b]))[0].tolist() == xy.tolist()  # the same picture each time
    assert project(np.zeros((0, 4), np.float32))[0].shape == (0, 2)
    assert project(np.ones((3, 4), np.float32))[0].shape == (3, 2)  # no spread: no crash


@pytest.fixture
def daemon(foldered: Built, tmp_path: Path) -> Daemon:
    p, root = foldered
    d = make_daemon(p, root, http_token=TOKEN, state_dir=tmp_path / "state")
    d.metrics.ready = True
    return d


@pytest.fixture
def client(daemon: Daemon) -> Iterator[TestClient]:
    with TestClient(daemon.app(), base_url="http://127.0.0.1:8765") as c:
        yield c


def test_picture_and_maps_need_the_token_and_come_gzipped(client: TestClient) -> None:
    for path in ("/dashboard/api/picture", "/dashboard/api/picture/map/0"):
        assert client.get(path).status_code == 401
    resp = client.get("/dashboard/api/picture", headers=AUTH | {"Accept-Encoding": "gzip"})
    assert resp.status_code == 200
    assert resp.headers["content-encoding"] == "gzip"
    out = resp.json()  # httpx undoes the gzip
    assert out["version"] == "start"
    assert out["touched_note"] == "no update since the daemon started"
    plain = client.get("/dashboard/api/picture", headers=AUTH | {"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert plain.json() == out
    assert len(gzip.compress(plain.content)) < len(plain.content)

    m = client.get(f"/dashboard/api/picture/map/{out['map_layer']}", headers=AUTH).json()
    start, count = next((e["start"], e["count"]) for e in out["layers"] if e["layer"] == 0)
    assert (m["layer"], m["start"], m["count"], m["version"]) == (0, start, count, "start")
    assert len(base64.b64decode(m["xy"])) == 4 * count
    missing = client.get("/dashboard/api/picture/map/9", headers=AUTH)
    assert missing.status_code == 400
    assert "no layer 9" in missing.json()["error"]


def test_after_an_update_the_picture_marks_the_nodes_it_wrote(
    daemon: Daemon, client: TestClient, foldered: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, root = foldered
    first = client.get("/dashboard/api/picture", headers=AUTH).json()
    (root / "notes" / "beta" / "new.txt").write_text(doc_text(random.Random(9), 6))
    report = p.update([root / "notes" / "beta" / "new.txt"])
    # A busy daemon records the update a moment after it ended: the picture still marks all of it.
    later = time.time() + 1.0
    monkeypatch.setattr(metrics_module, "time", SimpleNamespace(time=lambda: later))
    daemon.metrics.applied(report, p.require_state())

    out = client.get("/dashboard/api/picture", headers=AUTH).json()
    assert out["version"] != first["version"]
    assert out["n"] > first["n"]
    assert "files +1" in out["touched_note"]
    touched = set(decode(out, "touched", "<i4").tolist())
    ids = base64.b64decode(out["ids"])
    node_at = {str(uuid.UUID(bytes=ids[16 * k : 16 * k + 16])): k for k in range(out["n"])}
    new_leaves = {
        n.node_id for n in read_nodes(p.context.store, "t") if n.source == "notes/beta/new.txt"
    }
    assert len(new_leaves) == report.stats.leaves_added > 0
    assert {node_at[i] for i in new_leaves} <= touched
    old_leaves = {node_at[i] for i in node_at if i not in new_leaves} & set(range(out["width"]))
    assert not (old_leaves & touched)  # leaves it did not write are not marked


def test_the_picture_is_read_once_per_version(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = picture_module.lay_out

    def counting(nodes: list[Link]) -> Layout:
        calls.append(len(nodes))
        return real(nodes)

    monkeypatch.setattr("ingestor.service.dashboard.pictures.lay_out", counting)
    for _ in range(3):
        assert client.get("/dashboard/api/picture", headers=AUTH).status_code == 200
    assert client.get("/dashboard/api/picture/map/1", headers=AUTH).status_code == 200
    assert len(calls) == 1
