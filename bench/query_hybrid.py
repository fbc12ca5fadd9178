"""Hybrid (dense + BM25, fused) against dense collapsed-tree queries: latency, build, size.

    python bench/query_hybrid.py [--sizes 10000 100000] [--queries 200]
        [--bounds none default 20000:32] [--rounds 2] [--keep DIR]

The tree-shaped synthetic corpus of bench/query.py (384-d vectors, ~83 % leaves, two trees), each
node given a text of its own: ~150 words drawn from a Zipf vocabulary of 30k words, leaves of a
topic sharing a topic vocabulary, a summary the first words of its children. Per size: the store
is built dense-only (a shard created as before the sparse vector), timed, optimised and measured
on disk; then ``index_sparse()`` adds the BM25 vectors (the build time and size they add); then
``search_budget`` (2,000 tokens, limit 100, tree filter) runs per query (the question: 6 words of
the query leaf's text) dense and hybrid under each bound of ``--bounds`` (``none``: every query
term, prefetches as deep as before the bound; ``default``: the stores' own,
retriever.sparse.DEFAULT_BOUND; ``P``: the terms while their estimated postings fit P; ``P:D``:
and prefetches of at most D hits, never fewer than the fused hits asked for; ``P:D:S``: and a BM25
prefetch of at most S; ``:D``: every term), after a warm-up round, in rounds in which each query
runs every mode in turn (the order rotating), so that a load coming and going on a shared machine
weighs on each mode alike. ``--keep DIR``: build each size's store in DIR/SIZE once and reuse it
(same seed, same corpus).
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
from retriever.sparse import DEFAULT_BOUND, UNBOUNDED, HybridBound  # noqa: E402

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


def parse_bound(spec: str) -> HybridBound:
    """``none``, ``default``, ``P``, ``P:D`` or ``P:D:S`` (see the module's doc)."""
    if spec in ("none", "default"):
        return UNBOUNDED if spec == "none" else DEFAULT_BOUND
    parts = [int(x) if x else None for x in spec.split(":")]
    postings, depth, sparse_depth = parts + [None] * (3 - len(parts))
    return HybridBound(postings, depth, sparse_depth)


def build(store: EdgeNodeStore, folder: Path, c: object) -> tuple[float, float, float, float]:
    """Build the store dense-only (as before the sparse vector), then add BM25: seconds, MB."""
    store.ensure_collection(DIM, MODEL)
    t0 = time.perf_counter()
    store.upsert(c.nodes, c.vectors)  # type: ignore[attr-defined]
    store.optimize()
    dense_build = time.perf_counter() - t0
    dense_mb = disk_mb(folder)
    t0 = time.perf_counter()
    store.index_sparse()
    store.flush()
    return dense_build, dense_mb, time.perf_counter() - t0, disk_mb(folder)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--bounds", nargs="+", default=["none", "default"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--keep", type=Path, default=None)
    args = p.parse_args()
    bounds = {spec: parse_bound(spec) for spec in args.bounds}
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
            folder = (args.keep or Path(tmp)) / str(size) / "edge"
            built = folder.is_dir()
            if not built:
                params = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)
                config = qe.EdgeConfig(
                    vectors={VECTOR_NAME: params, LEAF_VECTOR: params},
                    quantization_config=qe.ScalarQuantizationConfig(
                        type=qe.ScalarType.Int8, always_ram=True
                    ),
                )
                folder.parent.mkdir(parents=True, exist_ok=True)
                qe.EdgeShard.create(str(folder), config).close()  # dense only, as before
            with EdgeNodeStore(folder, auto_optimize_points=None) as store:
                if built:
                    store.ensure_collection(DIM, MODEL)
                    note = f"reused store {folder}"
                else:
                    dense_build, dense_mb, sparse_build, sparse_mb = build(store, folder, c)
                    note = (
                        f"build dense {dense_build:.1f} s + BM25 {sparse_build:.1f} s; "
                        f"disk {dense_mb:,.0f} MB -> {sparse_mb:,.0f} MB"
                    )
                times = measure(store, case, questions, bounds, limit, args.rounds)
        d = times["dense"]
        print(
            f"{len(c.nodes):>7} nodes ({case.name} filter, {case.mask.mean():.0%} match, "
            f"{len(d)} queries each): dense p50 {pct(d, 50):.2f} ms p95 {pct(d, 95):.2f} ms; "
            f"{note}",
            flush=True,
        )
        for spec in bounds:
            h = times[spec]
            print(
                f"    hybrid, bound {spec:>10}: p50 {pct(h, 50):.2f} ms p95 {pct(h, 95):.2f} ms "
                f"(x{pct(h, 50) / pct(d, 50):.2f} p50, x{pct(h, 95) / pct(d, 95):.2f} p95)",
                flush=True,
            )
    return 0


def measure(
    store: EdgeNodeStore,
    case: object,
    questions: list[str],
    bounds: dict[str, HybridBound],
    limit: int,
    rounds: int,
) -> dict[str, list[float]]:
    """Seconds per query of each mode: ``dense`` and one per bound."""
    flt, queries = case.flt, case.queries  # type: ignore[attr-defined]
    modes: list[tuple[str, HybridBound | None]] = [("dense", None), *bounds.items()]
    times: dict[str, list[float]] = {name: [] for name, _ in modes}
    for r in range(rounds + 1):  # round 0: the warm-up
        for i, (q, text) in enumerate(zip(queries, questions, strict=True)):
            k = (i + r) % len(modes)
            for name, bound in modes[k:] + modes[:k]:
                if bound is not None:
                    store.hybrid_bound = bound
                t0 = time.perf_counter()
                store.search_budget(
                    q, flt, limit, MAX_TOKENS, text=text if bound is not None else None
                )
                if r:
                    times[name].append(time.perf_counter() - t0)
    return times


if __name__ == "__main__":
    raise SystemExit(main())
