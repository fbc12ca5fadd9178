"""Full-build benchmark over the 24 SQuAD articles: stage times, tree shape, peak memory, and the
ratio of the build to its floor (raw embedding of the same chunks with the same model).

    python bench/build.py [--articles N] [--summarizer extractive|openai] [--workers N]

Target (docs/benchmarks.md, build): build time ≤ 1.33 x raw embedding time.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from datasets import peak_rss_mb, squad_folder, squad_titles

from ingestor.cli.factories import make_embedder, make_pipeline
from ingestor.cluster.two_step import TreeClusterer
from ingestor.config import BuildSettings, Settings
from retriever.edge_store import EdgeNodeStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--articles", type=int, default=24)
    ap.add_argument(
        "--workers",
        type=int,
        default=0,
        help="build worker processes, as ADRAP_BUILD__WORKERS (default 0: every core)",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "squad"
        files, _ = squad_folder(corpus, squad_titles()[: args.articles])
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, state_dir=Path(tmp) / "state", build=BuildSettings(workers=args.workers)
        )

        t0 = time.perf_counter()
        embedder = make_embedder(settings)
        load_s = time.perf_counter() - t0

        # JIT warm-up: numba compiles UMAP's kernels once per process (cached on disk after that).
        t0 = time.perf_counter()
        rng = np.random.default_rng(0)
        warm = rng.standard_normal((200, embedder.dim)).astype(np.float32)
        TreeClusterer(random_state=0).fit(warm / np.linalg.norm(warm, axis=1, keepdims=True))
        warm_s = time.perf_counter() - t0

        store = EdgeNodeStore(settings.state_dir / "qdrant")
        pipeline = make_pipeline(settings, store, embedder)
        report = pipeline.build(corpus)
        store.close()

        # The floor: embedding the very same leaf texts, once, with the same model and batch size.
        from ingestor.pipeline import load_state

        state = load_state(pipeline.context.models, settings.tree, embedder)
        assert state is not None
        leaves = [n.text for n in state.nodes.values() if n.layer == 0]
        # Measured twice, best of two: the machine is shared and a single run can be slowed down.
        floor_runs = []
        for _ in range(2):
            t0 = time.perf_counter()
            embedder.embed_documents(leaves)
            floor_runs.append(time.perf_counter() - t0)
        floor_s = min(floor_runs)

    s = report.stats
    print(
        f"corpus: {len(files)} SQuAD articles, {sum(len(n) for n in leaves) / 1e6:.2f} M chars of leaves"
    )
    print(
        f"model load {load_s:.1f}s; UMAP/numba JIT warm-up {warm_s:.1f}s (once per process, not counted)"
    )
    print("stage seconds:")
    for stage, sec in s.seconds.items():
        print(f"  {stage:<16} {sec:8.2f}")
    print(f"  {'total build':<16} {report.seconds:8.2f}")
    print(f"leaves {report.leaves}; nodes per layer {report.layers}")
    print(
        f"clusters per layer {s.clusters_per_layer}; mean cluster size "
        f"{ {k: round(v, 2) for k, v in s.mean_cluster_size.items()} }"
    )
    print(f"summary calls {s.summary_calls} (cache hits {s.cache_hits})")
    print(
        f"raw embedding of the same {len(leaves)} chunks: {floor_s:.2f}s "
        f"({len(leaves) / floor_s:.1f} chunks/s)"
    )
    inside = s.seconds.get("embed_leaves", 0.0)
    overhead = report.seconds - inside
    print(
        f"non-embedding work {overhead:.1f}s = {overhead / inside:.2f} x the leaf embedding inside the "
        f"build ({inside:.1f}s); build / in-build embedding = {report.seconds / inside:.2f}"
    )
    ratio = report.seconds / floor_s
    print(
        f"RATIO build / raw embedding = {ratio:.2f}  (target ≤ 1.33: {'met' if ratio <= 1.33 else 'MISSED'})"
    )
    print(f"peak RSS {peak_rss_mb():.0f} MiB")


if __name__ == "__main__":
    main()
