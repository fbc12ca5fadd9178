"""The dashboard on a 100k-node tree: time to first paint, to expand a node, bytes of the first view.

    python bench/dashboard.py [--nodes 100000] [--repeat 5]

A synthetic tree of one tree name in an embedded store (qdrant-edge, no HNSW: the dashboard never
searches vectors): random 384-d vectors, ~1 kB leaf texts, summaries over 6 children each, layers
shrinking 6x (~83 % leaves), parents and children linked both ways. The dashboard's routes are
served by the daemon's HTTP stack (starlette + uvicorn, the same ``build_app``) over the store
alone; headless Chromium (Debian's, via Selenium) opens ``/dashboard`` and the script reports:

- first paint / first contentful paint (Paint Timing) and "first view" (the page's own
  ``adrap:ready`` mark: layers counted and the top layer's first page drawn);
- expand: the page's ``adrap:expand`` measure, click to children drawn, for a top node, a node of
  layer 1 (its children are leaves) and the leaf layer's first page;
- bytes of the first view: the document and every fetch (Resource Timing ``transferSize``);
- each endpoint's server-side latency (median of ``--repeat``), and peak RSS of this process
  (store + server) and of Chromium's processes;
- the picture (icicle of every node, PCA map of a layer): time to serve it the first time (the
  tree read and laid out) and from the cache, its bytes (plain and gzipped), the maps' times, and
  in Chromium the page's ``adrap:picture`` (fetch, decode, icicle drawn), ``adrap:picture-draw``
  (one redraw) and ``adrap:map`` measures; a screenshot goes to test-artifacts/dashboard-100k.png.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ingestor.service.concurrency import LockedStore  # noqa: E402
from ingestor.service.dashboard.routes import dashboard_routes  # noqa: E402
from ingestor.service.dashboard.view import TreeView  # noqa: E402
from ingestor.service.http import HttpLimits, HttpServer, build_app  # noqa: E402
from retriever.edge_store import EdgeNodeStore  # noqa: E402
from retriever.schema import Kind, NodePayload, point_id, source_dirs  # noqa: E402
from testkit.browser import chrome  # noqa: E402

DIM = 384
MODEL = "bench-synthetic-384"
TREE = "big"
FANOUT = 6


def make_tree(n: int, rng: np.random.Generator) -> list[list[NodePayload]]:
    """Return the layers (leaves first) of a ~``n``-node tree with links both ways."""
    n_leaves = round(n / sum(FANOUT**-i for i in range(7)))
    text = "lorem ipsum dolor sit amet " * 40
    # ~80 chunks per file, files grouped in 7 top-level folders (the picture's colours)
    files = [f"area{i * 7 // n_leaves}/topic{i // 800}/doc{i // 80}.md" for i in range(n_leaves)]
    layers: list[list[dict[str, Any]]] = [
        [
            {"id": point_id(f"{TREE}/0/{i}"), "sources": (files[i],), "children": (), "i": i}
            for i in range(n_leaves)
        ]
    ]
    while len(layers[-1]) > 10:
        below = layers[-1]
        k = len(layers)
        groups = [below[s : s + FANOUT] for s in range(0, len(below), FANOUT)]
        layers.append(
            [
                {
                    "id": point_id(f"{TREE}/{k}/{j}"),
                    "sources": tuple(sorted({s for c in g for s in c["sources"]})),
                    "children": tuple(c["id"] for c in g),
                }
                for j, g in enumerate(groups)
            ]
        )
    parents: dict[str, str] = {
        c: p["id"] for layer in layers[1:] for p in layer for c in p["children"]
    }
    out = []
    for k, layer in enumerate(layers):
        nodes = []
        for d in layer:
            leaf = k == 0
            nodes.append(
                NodePayload(
                    node_id=d["id"],
                    tree=TREE,
                    layer=k,
                    kind=Kind.CHUNK if leaf else Kind.SUMMARY,
                    text=text if leaf else text[:600],
                    n_tokens=int(rng.integers(150, 251)) if leaf else int(rng.integers(80, 161)),
                    content_hash=d["id"],
                    source=d["sources"][0] if leaf else None,
                    sources=d["sources"],
                    source_dirs=tuple(sorted({x for s in d["sources"] for x in source_dirs(s)})),
                    chunk_index=d.get("i") if leaf else None,
                    char_start=0 if leaf else None,
                    char_end=len(text) if leaf else None,
                    parents=(parents[d["id"]],) if d["id"] in parents else (),
                    children=d["children"],
                    summarizer=None if leaf else "extractive",
                    embed_model=MODEL,
                    updated_at=0.0,
                )
            )
        out.append(nodes)
    return out


def fill(store: EdgeNodeStore, layers: list[list[NodePayload]], rng: np.random.Generator) -> float:
    t0 = time.perf_counter()
    store.ensure_collection(DIM, MODEL)
    for nodes in layers:
        for s in range(0, len(nodes), 4096):
            batch = nodes[s : s + 4096]
            vecs = rng.standard_normal((len(batch), DIM)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            store.upsert(batch, vecs)
    store.flush()
    return time.perf_counter() - t0


def timed_get(url: str, repeat: int, gz: bool = False) -> tuple[float, int]:
    """Median ms of ``repeat`` GETs, and the bytes of the body as sent (``gz``: gzip asked)."""
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gz else {})
        with urllib.request.urlopen(req, timeout=120) as resp:
            size = len(resp.read())
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, size


def wait_css(driver: Any, css: str, timeout: float = 60) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def measured(driver: Any, name: str, before: int) -> float:
    """Wait for the page's ``name`` measure number ``before + 1``; return its duration (ms)."""
    script = f"return performance.getEntriesByName('{name}').map(e => e.duration)"
    for _ in range(3000):
        got = driver.execute_script(script)
        if len(got) > before:
            return float(got[before])
        time.sleep(0.01)
    raise AssertionError(f"no {name} measure")


def count(driver: Any, name: str) -> int:
    return int(driver.execute_script(f"return performance.getEntriesByName('{name}').length"))


def expand(driver: Any, css: str) -> float:
    """Click the toggle of the row at ``css``; return the page's adrap:expand measure (ms)."""
    from selenium.webdriver.common.by import By

    before = count(driver, "adrap:expand")
    row = driver.find_element(By.CSS_SELECTOR, css)
    row.find_element(By.CSS_SELECTOR, ":scope > .row .toggle").click()
    return measured(driver, "adrap:expand", before)


def open_layer(driver: Any, layer: int) -> float:
    """Open the section of ``layer``; return the page's adrap:layer measure (first page drawn)."""
    from selenium.webdriver.common.by import By

    before = count(driver, "adrap:layer")
    driver.find_element(By.CSS_SELECTOR, f"details.layer[data-layer='{layer}'] > summary").click()
    return measured(driver, "adrap:layer", before)


def browser_run(base: str) -> dict[str, Any]:
    driver = chrome()
    try:
        driver.get(base + "/dashboard")
        wait_css(driver, "body[data-ready='1']")
        wait_css(driver, "body[data-picture='1']", 180)
        pic = {k: measured(driver, f"adrap:{k}", 0) for k in ("picture", "picture-draw", "map")}
        (REPO / "test-artifacts").mkdir(exist_ok=True)
        driver.save_screenshot(str(REPO / "test-artifacts" / "dashboard-100k.png"))
        perf = driver.execute_script(
            """
            const paint = Object.fromEntries(
                performance.getEntriesByType('paint').map(e => [e.name, e.startTime]));
            const nav = performance.getEntriesByType('navigation')[0];
            const res = performance.getEntriesByType('resource');
            return {paint, ready: performance.getEntriesByName('adrap:ready')[0].startTime,
                    doc: nav.transferSize, doc_body: nav.encodedBodySize,
                    fetches: res.map(r => [r.name, r.transferSize, r.duration])};
            """
        )
        top = expand(driver, "details.layer[open] > ul.nodes > li.node")
        # layer 1: open its section (first page by offset id), then expand a node (leaves below)
        layer1_page = open_layer(driver, 1)
        l1 = expand(driver, "details.layer[data-layer='1'] > ul.nodes > li.node")
        leaves_page = open_layer(driver, 0)
        heap = driver.execute_script(
            "return performance.memory ? performance.memory.usedJSHeapSize : 0"
        )
        return perf | {
            "picture": pic,
            "expand_top_ms": top,
            "expand_layer1_ms": l1,
            "layer1_page_ms": layer1_page,
            "leaves_page_ms": leaves_page,
            "js_heap": heap,
            "browser_hwm_mb": browser_peak_rss_mb(driver.service.process.pid),
        }
    finally:
        driver.quit()


def browser_peak_rss_mb(root: int) -> float:
    """Sum of the peak RSS (VmHWM) of chromedriver and every process under it (Chromium's)."""
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
            fields = dict(line.split(":", 1) for line in lines if ":" in line)
            children.setdefault(int(fields["PPid"]), []).append(int(fields["Pid"]))
        except (OSError, KeyError, ValueError):
            continue
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    layers = make_tree(args.nodes, rng)
    total = sum(len(x) for x in layers)
    print(f"tree: {total} nodes, layers {[len(x) for x in layers]}")
    with tempfile.TemporaryDirectory() as tmp:
        store = EdgeNodeStore(Path(tmp) / "qdrant", auto_optimize_points=None)
        print(f"filled the embedded store in {fill(store, layers, rng):.1f} s")
        sizes = [len(x) for x in layers]
        del layers
        filled_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        view = TreeView(LockedStore(store), TREE)
        routes = dashboard_routes(
            view, lambda *_: {"tree": TREE, "updates": []}, readable=lambda _: None
        )  # the bench reads as the owner (anonymous would read nothing without a registry)
        app = build_app(routes, None)
        server = HttpServer(app, "127.0.0.1", 0, HttpLimits())
        server.start()
        try:
            host, port = server.address
            base = f"http://{host}:{port}"
            time.sleep(0.3)
            layer_list = json.loads(urllib.request.urlopen(base + "/dashboard/api/layers").read())
            top = layer_list["layers"][0]
            page = json.loads(
                urllib.request.urlopen(f"{base}/dashboard/api/layer/{top['layer']}").read()
            )
            some = page["nodes"][0]["node_id"]
            leaves = json.loads(
                urllib.request.urlopen(base + "/dashboard/api/layer/0?limit=200").read()
            )
            deep = leaves["next"]
            deep_page = 1
            for _ in range(20):  # walk up to 20 pages in: an offset deep in the leaf layer
                after = json.loads(
                    urllib.request.urlopen(
                        f"{base}/dashboard/api/layer/0?limit=200&offset={deep}"
                    ).read()
                )["next"]
                if after is None:
                    break
                deep, deep_page = after, deep_page + 1
            print("\nthe picture, server side (ms, bytes as sent):")
            for name, path in (
                ("picture, first (gz)", "/dashboard/api/picture"),
                ("picture, cached (gz)", "/dashboard/api/picture"),
                ("picture, cached", "/dashboard/api/picture"),
                (f"map layer 1 first ({sizes[1]})", "/dashboard/api/picture/map/1"),
                ("map layer 1 cached", "/dashboard/api/picture/map/1"),
                (f"map leaves first ({sizes[0]})", "/dashboard/api/picture/map/0"),
            ):
                once = "first" in name
                ms, size = timed_get(base + path, 1 if once else args.repeat, "gz" in name)
                print(f"  {name:<28} {ms:8.1f} ms {size:>9} B")
            print(f"\nserver side, median of {args.repeat} (ms, bytes):")
            for name, path in (
                ("page /dashboard", "/dashboard"),
                ("layers (counts)", "/dashboard/api/layers"),
                ("top layer page", f"/dashboard/api/layer/{top['layer']}"),
                ("leaf page 1 (50)", "/dashboard/api/layer/0"),
                (
                    f"leaf page {deep_page + 1} (200)",
                    f"/dashboard/api/layer/0?limit=200&offset={deep}",
                ),
                ("node", f"/dashboard/api/node/{some}"),
                ("children", f"/dashboard/api/children/{some}"),
            ):
                ms, size = timed_get(base + path, args.repeat)
                print(f"  {name:<20} {ms:8.1f} ms {size:>9} B")
            runs = [browser_run(base) for _ in range(max(1, min(args.repeat, 3)))]
        finally:
            server.stop()
            store.close()
    med = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
    first = runs[-1]
    fetched = sum(f[1] for f in first["fetches"])
    print(f"\nheadless Chromium, median of {len(runs)} page loads (ms):")
    print(
        f"  first paint            {statistics.median(r['paint'].get('first-paint', 0) for r in runs):8.1f}"
    )
    print(
        "  first contentful paint "
        f"{statistics.median(r['paint'].get('first-contentful-paint', 0) for r in runs):8.1f}"
    )
    print(f"  first view (top layer) {med('ready'):8.1f}")
    print(f"  expand a top node      {med('expand_top_ms'):8.1f}")
    print(f"  open layer 1 (page 1)  {med('layer1_page_ms'):8.1f}")
    print(f"  expand a layer-1 node  {med('expand_layer1_ms'):8.1f}")
    print(f"  open the leaf layer    {med('leaves_page_ms'):8.1f}")
    for k, what in (
        ("picture", "picture: fetch+decode+icicle"),
        ("picture-draw", "picture: one icicle redraw"),
        ("map", "map: fetch+decode+draw"),
    ):
        print(f"  {what:<30} {statistics.median(r['picture'][k] for r in runs):8.1f}")
    n_fetches = len(first["fetches"])
    print(
        f"\nbytes for the first view: document {first['doc']} B + {n_fetches} fetches {fetched} B"
    )
    for name, size, dur in first["fetches"]:
        print(f"  {name.split('/', 3)[-1]:<40} {size:>7} B {dur:6.1f} ms")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"\npeak RSS: this process {own:.0f} MB (of which {filled_mb:.0f} MB before serving: "
        f"generating and storing the synthetic tree); Chromium + chromedriver (sum of per-process "
        f"peaks) {statistics.median(r['browser_hwm_mb'] for r in runs):.0f} MB; "
        f"page JS heap {first['js_heap'] / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    main()
