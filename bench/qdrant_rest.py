"""Collapsed-tree query through the daemon's Qdrant REST facade vs through its ``/query``.

    python bench/qdrant_rest.py [--sizes 10000 100000] [--queries 200]

The synthetic tree of bench/query.py (384-d, tree-shaped, two trees) is stored in an embedded
store (upsert + HNSW build), which is served over real HTTP (uvicorn on loopback) exactly as
``adrap watch`` serves it: the daemon's ``/query`` route and the facade's routes, over the same
locked store. Each query is the same 384-d vector and filter ``tree == "big"``, timed per request
from the client (HTTP + JSON both ways), p50 / p95 in ms:

- ``/query``: ``GET /query?q=...&max_tokens=2000`` (collapsed: one planned query, limit 100, then
  the payloads the fill keeps). Embedding the question is a dictionary look-up here, so the
  figure is retrieval + HTTP; the real model adds its own few ms to every path alike.
- ``facade recipe``: docs/clients.md's recipe: ``POST /collections/adrap/points/query`` with limit
  100 and full payloads, then the 2000-token fill in the client (httpx + ``json``).
- ``facade 2-step``: the same query with ``with_payload: ["n_tokens"]``, the fill, then
  ``POST .../points`` for the payloads of the nodes taken.
- ``QdrantClient``: the recipe through ``QdrantClient(url=...).query_points`` (its pydantic
  parsing included).

Every path must return the same node ids as ``/query`` (checked on every query). The figures
ratio is to ``/query``. Peak RSS is of this one process (store + server + clients).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from qdrant_client import QdrantClient, models  # noqa: E402
from synthetic_tree import DIM, MODEL, TREES, make_corpus, make_queries  # noqa: E402

from ingestor.answer.service import QueryDefaults, QueryService  # noqa: E402
from ingestor.service.concurrency import LockedShard, LockedStore  # noqa: E402
from ingestor.service.daemon.routes import daemon_routes  # noqa: E402
from ingestor.service.http import HttpLimits, HttpServer, build_app  # noqa: E402
from ingestor.service.qdrant_rest import qdrant_routes  # noqa: E402
from retriever import EdgeNodeStore, EdgeRestReader  # noqa: E402
from retriever.budget import fill as budget_fill  # noqa: E402
from retriever.search import candidate_limit  # noqa: E402

MAX_TOKENS = 2000
LIMIT = candidate_limit(MAX_TOKENS)


class LookupEmbedder:
    """Questions are keys of precomputed vectors: ``/query`` pays no model time."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.model_id = MODEL
        self.dim = DIM

    def embed_query(self, text: str) -> np.ndarray:
        return self.vectors[text]

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill(points: Sequence[Any], tokens: Callable[[Any], int]) -> list[Any]:
    """The client's 2000-token fill: adrap's one rule (retriever.budget)."""
    return budget_fill(points, tokens, MAX_TOKENS)


def bench(size: int, n: int, rng: np.random.Generator) -> list[tuple[str, list[float]]]:
    c = make_corpus(size, rng)
    queries = make_queries(c, c.leaves, n, rng)
    vectors = {f"q{i}": q for i, q in enumerate(queries)}
    flt = {"must": [{"key": "tree", "match": {"value": TREES[0]}}]}
    with tempfile.TemporaryDirectory(prefix="adrap-bench-") as tmp:
        inner = EdgeNodeStore(Path(tmp) / "edge", auto_optimize_points=None)
        inner.ensure_collection(DIM, MODEL)
        t0 = time.perf_counter()
        inner.upsert(c.nodes, c.vectors)
        inner.optimize()
        print(
            f"{size:>7} nodes: stored and indexed in {time.perf_counter() - t0:.1f} s", flush=True
        )
        store = LockedStore(inner)
        service = QueryService(
            store, LookupEmbedder(vectors), TREES[0], defaults=QueryDefaults("collapsed", 2000, 5)
        )
        service.lock = threading.Lock()
        limits = HttpLimits()
        fake_daemon = SimpleNamespace(
            ready=True,
            queries=service,
            feed=None,
            # as the owner, as the facade below: the bench measures the paths, not access
            query=lambda params, caller=None: service.query(params),
            ask=service.ask,
            changes=lambda params, caller=None: {},
        )
        routes = daemon_routes(fake_daemon, limits) + qdrant_routes(  # type: ignore[arg-type]
            EdgeRestReader(LockedShard(store, inner), "adrap"),
            root=Path(tmp),
            limits=limits,
            ready=lambda: True,
            readable=lambda _: None,  # as the owner: the bench measures the facade, not access
        )
        server = HttpServer(build_app(routes, None), "127.0.0.1", 0, limits)
        server.start()
        base = "http://{}:{}".format(*server.address)
        try:
            return run(base, vectors, flt, n)
        finally:
            server.stop()
            inner.close()


def run(
    base: str, vectors: dict[str, np.ndarray], flt: dict[str, Any], n: int
) -> list[tuple[str, list[float]]]:
    http = httpx.Client(base_url=base, timeout=60)
    client = QdrantClient(url=base, check_compatibility=False, timeout=60)
    qfilter = models.Filter.model_validate(flt)
    url = "/collections/adrap/points"

    def via_query(q: str) -> list[str]:
        r = http.get("/query", params={"q": q, "max_tokens": MAX_TOKENS})
        r.raise_for_status()
        return [h["node_id"] for h in r.json()["hits"]]

    def recipe(q: str) -> list[str]:
        body = {"query": vectors[q].tolist(), "using": "dense", "limit": LIMIT}
        r = http.post(url + "/query", json=body | {"with_payload": True, "filter": flt})
        r.raise_for_status()
        return [
            p["id"] for p in fill(r.json()["result"]["points"], lambda p: p["payload"]["n_tokens"])
        ]

    def two_step(q: str) -> list[str]:
        body = {"query": vectors[q].tolist(), "using": "dense", "limit": LIMIT}
        r = http.post(url + "/query", json=body | {"with_payload": ["n_tokens"], "filter": flt})
        r.raise_for_status()
        ids = [
            p["id"] for p in fill(r.json()["result"]["points"], lambda p: p["payload"]["n_tokens"])
        ]
        got = http.post(url, json={"ids": ids, "with_payload": True})
        got.raise_for_status()
        assert len(got.json()["result"]) == len(ids)
        return ids

    def python_client(q: str) -> list[str]:
        points = client.query_points(
            "adrap",
            query=vectors[q].tolist(),
            using="dense",
            limit=LIMIT,
            with_payload=True,
            query_filter=qfilter,
        ).points
        return [str(p.id) for p in fill(points, lambda p: p.payload["n_tokens"])]

    paths = {
        "/query": via_query,
        "facade recipe": recipe,
        "facade 2-step": two_step,
        "QdrantClient": python_client,
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for q in list(vectors)[: min(20, n)]:  # warm: page cache, connections, imports
        for fn in paths.values():
            fn(q)
    for q in vectors:
        want = None
        for name, fn in paths.items():
            t0 = time.perf_counter()
            got = fn(q)
            times[name].append(time.perf_counter() - t0)
            want = got if want is None else want
            assert got == want, (name, q)
    http.close()
    client.close()
    return list(times.items())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = []
    for size in args.sizes:
        rows += [(size, name, ts) for name, ts in bench(size, args.queries, rng)]
    print(f"\n{'nodes':>7} {'path':<15} {'p50 ms':>8} {'p95 ms':>8} {'x /query':>9}")
    base: dict[int, float] = {}
    for size, name, ts in rows:
        p50, p95 = (float(np.percentile(np.asarray(ts) * 1e3, q)) for q in (50, 95))
        base.setdefault(size, p50)
        print(f"{size:>7} {name:<15} {p50:>8.2f} {p95:>8.2f} {p50 / base[size]:>9.2f}")
    print(
        f"\n{args.queries} queries per path, filter tree == {TREES[0]!r}, limit {LIMIT}, "
        f"{MAX_TOKENS}-token fill; same node ids on every path; peak RSS {peak_mb():,.0f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
