"""Hybrid (dense + BM25, fused) against dense collapsed-tree queries: latency, build, size.

    python bench/query_hybrid.py [--sizes 10000 100000] [--queries 200]

The tree-shaped synthetic corpus of bench/query.py (384-d vectors, ~83 % leaves, two trees), each
node given a text of its own: ~150 words drawn from a Zipf vocabulary of 30k words, leaves of a
topic sharing a topic vocabulary, a summary the first words of its children. Per size: the store
is built dense-only (a shard created as before the sparse vector), timed, optimised and measured
on disk; then ``index_sparse()`` adds the BM25 vectors (the build time and size they add); then
``search_budget`` (2,000 tokens, limit 100, tree filter) runs per query dense and hybrid (the
question: 6 words of the query leaf's text), each in a pass of its own after a warm-up pass.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import qdrant_edge as qe  # noqa: E402
from synthetic_tree import DIM, MODEL, make_cases, make_corpus  # noqa: E402

from retriever.edge_store import EdgeNodeStore  # noqa: E402
from retriever.schema import LEAF_VECTOR, VECTOR_NAME  # noqa: E402
from retriever.search import candidate_limit  # noqa: E402

MAX_TOKENS = 2000


def disk_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def pct(ts: list[float], q: float) -> float:
    return float(np.percentile(ts, q) * 1000)


def texts_for(c: object, rng: np.random.Generator) -> list[str]:
    nodes = c.nodes  # type: ignore[attr-defined]
    vocab = np.array([f"w{i}" for i in range(30_000)])
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    zipf /= zipf.sum()
    by_id: dict[str, str] = {}
    out = []
    for n in nodes:
        if n.layer == 0:
            topic = int(rng.integers(0, 500))
            local = rng.choice(len(vocab), 60, replace=False) + topic  # a topic's own words
            words = list(vocab[rng.choice(len(vocab), 110, p=zipf)])
            words += list(vocab[local[rng.integers(0, 60, 40)] % len(vocab)])
            rng.shuffle(words)
            text = " ".join(words)
        else:
            text = " ".join(by_id[ch].split()[0] for ch in n.children)[:600] or "summary"
        by_id[n.node_id] = text
        out.append(text)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--queries", type=int, default=200)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    limit = candidate_limit(MAX_TOKENS)
    for size in args.sizes:
        c = make_corpus(size, rng)
        texts = texts_for(c, rng)
        c.nodes = [n.model_copy(update={"text": t}) for n, t in zip(c.nodes, texts, strict=True)]
        case = make_cases(c, args.queries, rng)[0]  # the tree filter
        text_of = {n.node_id: n.text for n in c.nodes}
        leaves = [n for n in c.nodes if n.layer == 0 and n.tree == case.flt.tree]
        questions = [
            " ".join(rng.choice(text_of[leaves[int(i)].node_id].split(), 6))
            for i in rng.integers(0, len(leaves), len(case.queries))
        ]
        with tempfile.TemporaryDirectory(prefix="adrap-hybrid-") as tmp:
            folder = Path(tmp) / "edge"
            params = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)
            config = qe.EdgeConfig(
                vectors={VECTOR_NAME: params, LEAF_VECTOR: params},
                quantization_config=qe.ScalarQuantizationConfig(
                    type=qe.ScalarType.Int8, always_ram=True
                ),
            )
            qe.EdgeShard.create(str(folder), config).close()  # dense only, as before
            with EdgeNodeStore(folder, auto_optimize_points=None) as store:
                store.ensure_collection(DIM, MODEL)
                t0 = time.perf_counter()
                store.upsert(c.nodes, c.vectors)
                store.optimize()
                dense_build = time.perf_counter() - t0
                dense_mb = disk_mb(folder)
                t0 = time.perf_counter()
                store.index_sparse()
                store.flush()
                sparse_build = time.perf_counter() - t0
                sparse_mb = disk_mb(folder)
                times: dict[str, list[float]] = {"dense": [], "hybrid": []}
                for q, text in zip(case.queries, questions, strict=True):  # warm-up
                    store.search_budget(q, case.flt, limit, MAX_TOKENS, text=text)
                    store.search_budget(q, case.flt, limit, MAX_TOKENS)
                for mode in ("dense", "hybrid", "dense", "hybrid"):
                    for q, text in zip(case.queries, questions, strict=True):
                        t0 = time.perf_counter()
                        store.search_budget(
                            q, case.flt, limit, MAX_TOKENS, text=text if mode == "hybrid" else None
                        )
                        times[mode].append(time.perf_counter() - t0)
        d, h = times["dense"], times["hybrid"]
        print(
            f"{len(c.nodes):>7} nodes ({case.name} filter, {case.mask.mean():.0%} match, "
            f"{len(d)} queries each): dense p50 {pct(d, 50):.2f} ms p95 {pct(d, 95):.2f} ms; "
            f"hybrid p50 {pct(h, 50):.2f} ms p95 {pct(h, 95):.2f} ms "
            f"(x{pct(h, 50) / pct(d, 50):.2f} p50, x{pct(h, 95) / pct(d, 95):.2f} p95); "
            f"build dense {dense_build:.1f} s + BM25 {sparse_build:.1f} s; "
            f"disk {dense_mb:,.0f} MB -> {sparse_mb:,.0f} MB",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
