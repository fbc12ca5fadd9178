"""Collapsed-tree query latency: one filtered ANN search + the token-budget fill, vs numpy exact.

    python bench/query.py [--sizes 10000 100000] [--queries 200] [--ef 64 128]

Synthetic but tree-shaped data: 384-d normalised vectors, leaves clustered by topic (like real
sentence embeddings), each summary the normalised mean of ~6 children, layer sizes shrinking 6x
per layer (~83 % leaves), two trees (~60/40), sources in nested folders. Queries are perturbed
leaves. For each size the embedded store (qdrant-edge) is built in a temp dir, optimised (HNSW
built), then queried with three filters. The server adapter runs on ``QdrantClient(":memory:")``
at 10k only: local mode, a pure-Python test double, not a production store.

Brute force = a matrix-vector product over the vectors the filter keeps (pre-masked, contiguous)
plus argpartition and a sort of the top ``limit``; it returns ids only, no payloads and no fill.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Brute force is a single-threaded matrix-vector product: OpenBLAS threads only add wake-up
# latency at these sizes and fight the engine's search threads for the 2 cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from numpy.typing import NDArray

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from qdrant_client import QdrantClient  # noqa: E402

from retriever.edge_store import EdgeNodeStore  # noqa: E402
from retriever.qdrant_store import QdrantNodeStore  # noqa: E402
from retriever.schema import Kind, NodePayload, SearchFilter, point_id, source_dirs  # noqa: E402
from retriever.search import candidate_limit, fill_budget  # noqa: E402

DIM = 384
MODEL = "bench-synthetic-384"
MAX_TOKENS = 2000
FANOUT = 6
TREES = ("big", "small")


@dataclass
class Corpus:
    nodes: list[NodePayload]
    vectors: NDArray[np.float32]
    trees: NDArray[np.str_]
    layers: NDArray[np.int64]
    folders: list[tuple[str, ...]]  # source_dirs per node
    leaves: NDArray[np.int64]  # indices of layer-0 nodes


def _normalise(x: NDArray[np.float32]) -> NDArray[np.float32]:
    out: NDArray[np.float32] = x / np.linalg.norm(x, axis=-1, keepdims=True)
    return out


def make_corpus(n: int, rng: np.random.Generator) -> Corpus:
    """Build ``n`` tree-shaped nodes: leaves by topic, summaries = means of ~6 children."""
    n_leaves = round(n / sum(FANOUT**-i for i in range(5)))
    text = "lorem ipsum dolor sit amet " * 40  # ~1 kB, like a 250-token chunk
    n_topics = max(8, n_leaves // 150)
    centroids = rng.standard_normal((n_topics, DIM)).astype(np.float32)
    nodes: list[NodePayload] = []
    vecs: list[NDArray[np.float32]] = []
    big = round(n_leaves * 0.6)
    for tree, count in zip(TREES, (big, n_leaves - big), strict=True):
        topic = np.sort(rng.integers(0, n_topics, count))
        noise = rng.standard_normal((count, DIM)).astype(np.float32) * 1.1
        layer_vecs = _normalise(centroids[topic] + noise)
        files = [
            f"area{t % 7}/topic{t}/doc{rng.integers(0, 20)}.md" for t in topic
        ]  # documents follow topics, like a real folder
        layer_sources: list[tuple[str, ...]] = [(f,) for f in files]
        layer_ids = []
        for i in range(count):
            node = NodePayload(
                node_id=point_id(f"{tree}/0/{i}"),
                tree=tree,
                layer=0,
                kind=Kind.CHUNK,
                text=text,
                n_tokens=int(rng.integers(150, 251)),
                content_hash=f"{tree}-{i}",
                source=files[i],
                sources=(files[i],),
                source_dirs=source_dirs(files[i]),
                chunk_index=i,
                char_start=0,
                char_end=len(text),
                embed_model=MODEL,
                updated_at=0.0,
            )
            nodes.append(node)
            layer_ids.append(node.node_id)
        vecs.append(layer_vecs)
        layer = 0
        while len(layer_ids) > 10 and layer < 4:
            layer += 1
            groups = [
                range(s, min(s + FANOUT, len(layer_ids))) for s in range(0, len(layer_ids), FANOUT)
            ]
            parent_vecs = _normalise(np.stack([layer_vecs[list(g)].mean(axis=0) for g in groups]))
            parent_sources = [
                tuple(sorted({s for c in g for s in layer_sources[c]})) for g in groups
            ]
            parent_ids = []
            for j, g in enumerate(groups):
                srcs = parent_sources[j]
                node = NodePayload(
                    node_id=point_id(f"{tree}/{layer}/{j}"),
                    tree=tree,
                    layer=layer,
                    kind=Kind.SUMMARY,
                    text=text[:600],
                    n_tokens=int(rng.integers(80, 161)),
                    content_hash=f"{tree}-{layer}-{j}",
                    sources=srcs,
                    source_dirs=tuple(sorted({d for s in srcs for d in source_dirs(s)})),
                    children=tuple(layer_ids[c] for c in g),
                    summarizer="extractive",
                    embed_model=MODEL,
                    updated_at=0.0,
                )
                nodes.append(node)
                parent_ids.append(node.node_id)
            vecs.append(parent_vecs)
            layer_ids, layer_vecs, layer_sources = parent_ids, parent_vecs, parent_sources
    vectors = np.ascontiguousarray(np.concatenate(vecs), dtype=np.float32)
    layers = np.array([nd.layer for nd in nodes])
    return Corpus(
        nodes=nodes,
        vectors=vectors,
        trees=np.array([nd.tree for nd in nodes]),
        layers=layers,
        folders=[nd.source_dirs for nd in nodes],
        leaves=np.nonzero(layers == 0)[0],
    )


@dataclass
class Case:
    name: str
    flt: SearchFilter
    mask: NDArray[np.bool_]  # which nodes the filter keeps
    queries: NDArray[np.float32]


def make_cases(c: Corpus, k: int, rng: np.random.Generator) -> list[Case]:
    """Three filters. Folder queries come from that folder ("search reports/ about reports")."""
    big = c.trees == TREES[0]
    folder = "area3/"
    in_folder = np.array([folder in f for f in c.folders])
    anywhere = make_queries(c, c.leaves, k, rng)
    return [
        Case("tree", SearchFilter(tree=TREES[0]), big, anywhere),
        Case(
            "tree+layer>=1",
            SearchFilter(tree=TREES[0], min_layer=1),
            big & (c.layers >= 1),
            anywhere,
        ),
        Case(
            "tree+folder",
            SearchFilter(tree=TREES[0], source_prefix=folder),
            big & in_folder,
            make_queries(c, np.nonzero(big & in_folder & (c.layers == 0))[0], k, rng),
        ),
    ]


def make_queries(
    c: Corpus, pool: NDArray[np.int64], k: int, rng: np.random.Generator
) -> NDArray[np.float32]:
    """Return ``k`` queries: leaves of ``pool``, perturbed (a question near some content)."""
    base = c.vectors[rng.choice(pool, size=k)]
    return _normalise(base + 0.08 * rng.standard_normal(base.shape).astype(np.float32))


def greedy(ids: Sequence[str], tokens: dict[str, int]) -> list[str]:
    """The collapsed-tree fill on ids in score order (what fill_budget does on hits)."""
    out, total = [], 0
    for i in ids:
        if total + tokens[i] > MAX_TOKENS:
            break
        total += tokens[i]
        out.append(i)
    return out


def pct(ts: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(ts) * 1e3, q))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@dataclass
class Row:
    adapter: str
    size: int
    name: str
    match: float
    fill: list[float]  # store.search + fill_budget
    budget: list[float]  # store.search_budget
    brute: list[float]
    recall: float  # recall@limit of the ANN hits vs exact
    fill_recall: float  # share of the exact fill's nodes that the ANN fill also returns


def run_queries(
    store: EdgeNodeStore | QdrantNodeStore,
    c: Corpus,
    cases: Sequence[Case],
    limit: int,
    n: int,
    label: str,
) -> list[Row]:
    """Time both query paths and brute force on every case; measure ANN quality."""
    rows = []
    ids = np.array([nd.node_id for nd in c.nodes])
    tokens = {nd.node_id: nd.n_tokens for nd in c.nodes}
    for case in cases:
        sub = np.ascontiguousarray(c.vectors[case.mask])
        sub_ids = ids[case.mask]
        k = min(limit, len(sub_ids))
        for q in case.queries[:n]:  # warm the page cache: the daemon's steady state
            store.search(q, case.flt, limit)
        fill: list[float] = []
        budget: list[float] = []
        brute: list[float] = []
        recalls: list[float] = []
        fill_recalls: list[float] = []
        for q in case.queries[:n]:
            t0 = time.perf_counter()
            hits = fill_budget(store.search(q, case.flt, limit), MAX_TOKENS)
            t1 = time.perf_counter()
            store.search_budget(q, case.flt, limit, MAX_TOKENS)
            t2 = time.perf_counter()
            scores = sub @ q
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top])]
            t3 = time.perf_counter()
            fill.append(t1 - t0)
            budget.append(t2 - t1)
            brute.append(t3 - t2)
            exact = sub_ids[top].tolist()
            ann = [h.node.node_id for h in store.search(q, case.flt, limit)]
            recalls.append(len(set(exact) & set(ann)) / max(k, 1))
            exact_fill = greedy(exact, tokens)
            got = {h.node.node_id for h in hits}
            fill_recalls.append(len(got & set(exact_fill)) / max(len(exact_fill), 1))
        rows.append(
            Row(
                label,
                len(c.nodes),
                case.name,
                float(case.mask.mean()),
                fill,
                budget,
                brute,
                float(np.mean(recalls)),
                float(np.mean(fill_recalls)),
            )
        )
    return rows


def print_rows(rows: Sequence[Row], limit: int) -> None:
    head = (
        f"{'adapter':<15} {'nodes':>7} {'filter':<14} {'match':>6} "
        f"{'search+fill p50':>15} {'p95':>6} {'search_budget p50':>17} {'p95':>6} "
        f"{'brute p50':>9} {'p95':>6} {'ratio':>6} {'recall@' + str(limit):>10} {'fill-recall':>11}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        f50, b50 = pct(r.fill, 50), pct(r.brute, 50)
        print(
            f"{r.adapter:<15} {r.size:>7} {r.name:<14} {r.match:>6.1%} "
            f"{f50:>12.2f} ms {pct(r.fill, 95):>6.2f} "
            f"{pct(r.budget, 50):>14.2f} ms {pct(r.budget, 95):>6.2f} "
            f"{b50:>6.2f} ms {pct(r.brute, 95):>6.2f} {f50 / b50:>6.1f} "
            f"{r.recall:>10.3f} {r.fill_recall:>11.3f}"
        )


def bench_edge(
    c: Corpus, cases: Sequence[Case], limit: int, n: int, efs: Sequence[int]
) -> tuple[str, list[Row]]:
    """Build the embedded store in a temp dir (upsert, then the HNSW build) and query it."""
    with (
        tempfile.TemporaryDirectory(prefix="adrap-bench-") as tmp,
        EdgeNodeStore(Path(tmp) / "edge", auto_optimize_points=None) as store,
    ):
        store.ensure_collection(DIM, MODEL)
        t0 = time.perf_counter()
        store.upsert(c.nodes, c.vectors)
        t1 = time.perf_counter()
        store.optimize()
        t2 = time.perf_counter()
        build = (
            f"edge   {len(c.nodes):>7} nodes: upsert {len(c.nodes) / (t1 - t0):>8,.0f} points/s, "
            f"optimize (HNSW build) {t2 - t1:6.1f} s, peak RSS {peak_mb():,.0f} MB"
        )
        print(build, flush=True)
        rows = run_queries(store, c, cases, limit, n, "edge")
        for ef in efs:
            store.hnsw_ef = ef
            rows += run_queries(store, c, cases, limit, n, f"edge ef={ef}")
    return build, rows


def bench_server(c: Corpus, cases: Sequence[Case], limit: int, n: int) -> tuple[str, list[Row]]:
    """The server adapter on qdrant-client local mode: a test double, timed for scale only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Payload indexes have no effect")
        with QdrantNodeStore(QdrantClient(":memory:"), "bench", owns_client=True) as store:
            store.ensure_collection(DIM, MODEL)
            t0 = time.perf_counter()
            store.upsert(c.nodes, c.vectors)
            t1 = time.perf_counter()
            build = (
                f"server {len(c.nodes):>7} nodes: upsert {len(c.nodes) / (t1 - t0):>8,.0f} "
                "points/s on QdrantClient(':memory:') = local mode, not a production store "
                f"({n} queries), peak RSS {peak_mb():,.0f} MB"
            )
            print(build, flush=True)
            rows = run_queries(store, c, cases, limit, n, "local :memory:")
    return build, rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--limit", type=int, default=candidate_limit(MAX_TOKENS))
    p.add_argument("--ef", type=int, nargs="*", default=[], help="extra hnsw_ef values to sweep")
    p.add_argument("--server-size", type=int, default=10_000, help="0 skips the server adapter")
    p.add_argument("--server-queries", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows: list[Row] = []
    builds: list[str] = []
    for size in args.sizes:
        c = make_corpus(size, rng)
        cases = make_cases(c, args.queries, rng)
        build, found = bench_edge(c, cases, args.limit, args.queries, args.ef)
        builds.append(build)
        rows += found
        if size == args.server_size:
            build, found = bench_server(c, cases, args.limit, args.server_queries)
            builds.append(build)
            rows += found

    print(
        f"\nsearch+fill = store.search(limit {args.limit}) + fill_budget({MAX_TOKENS}); "
        "search_budget = the same ANN query returning n_tokens, fill, then fetch kept payloads;\n"
        f"{args.queries} queries per filter (after one untimed pass: warm page cache), 384-d; "
        "brute force = numpy exact (1 BLAS thread) "
        "on the pre-masked vectors, ids only; ratio = search+fill / brute force"
    )
    print("\n".join(builds) + "\n")
    print_rows(rows, args.limit)
    print(f"\npeak RSS {peak_mb():,.0f} MB; target: edge ANN+fill <= 5 ms p50 at 100k nodes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
