"""Watcher daemon benchmark (in-process daemon, real embedding model, extractive summaries).

Part 1, file-to-searchable latency: ~10-chunk files created one at a time in a watched folder;
latency = file written → its update committed and its leaves found in the store. p50/p90 over
``--files`` files, against the floor: the debounce plus embedding those chunks alone.

Part 2, burst: ``--burst`` small files created at once; time until the tree equals the folder,
against building the same folder from scratch (build throughput).

    python bench/watch.py [--files 20] [--burst 500] [--debounce 1.0]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datasets import peak_rss_mb

from ingestor.cli.factories import make_embedder, make_pipeline
from ingestor.config import Settings
from ingestor.pipeline import Pipeline
from ingestor.read.chunking import chunk_text
from ingestor.service.daemon import Daemon
from retriever import SearchFilter
from retriever.edge_store import EdgeNodeStore

ROOT = Path(__file__).resolve().parents[1]
WORDS = [
    "orchard",
    "cider",
    "harvest",
    "rocket",
    "orbit",
    "launch",
    "violin",
    "concert",
    "glacier",
    "valley",
    "court",
    "contract",
    "judge",
    "river",
    "bridge",
    "lantern",
    "harbour",
    "falcon",
    "meadow",
    "copper",
    "engine",
    "winter",
    "market",
    "ledger",
    "signal",
]


def prose(rng: random.Random, n_sentences: int) -> str:
    return " ".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 18))).capitalize() + "."
        for _ in range(n_sentences)
    )


def ten_chunk_text(rng: random.Random, p: Pipeline) -> str:
    """Grow a text until it chunks into 10 chunks with the pipeline's settings."""
    text = prose(rng, 60)
    while (
        len(
            chunk_text(
                text, max_tokens=p.chunk_tokens, overlap=p.chunk_overlap, tokenizer=p.tokenizer
            )
        )
        < 10
    ):
        text += " " + prose(rng, 10)
    return text


def wait(cond: object, timeout: float = 600) -> None:
    assert callable(cond)
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--debounce", type=float, default=1.0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    tmp = Path(tempfile.mkdtemp(prefix="adrap-bench-watch-"))
    folder = tmp / "docs"
    folder.mkdir()
    for f in (ROOT / "examples" / "sample").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    settings = Settings(_env_file=None, state_dir=tmp / "state")  # type: ignore[call-arg]
    embedder = make_embedder(settings)
    store = EdgeNodeStore(settings.state_dir / "qdrant")
    p = make_pipeline(settings, store, embedder)
    d = Daemon(p, folder, debounce=args.debounce, http_port=-1, exclude=[settings.state_dir])
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t0 = time.perf_counter()
    t.start()
    wait(lambda: d.metrics.ready)
    print(f"start-up (first run = build of examples/sample): {time.perf_counter() - t0:.1f}s")

    rng = random.Random(0)
    latencies: list[float] = []
    floors: list[float] = []
    try:
        for i in range(args.files):
            text = ten_chunk_text(rng, p)
            chunks = [
                c.text
                for c in chunk_text(
                    text, max_tokens=p.chunk_tokens, overlap=p.chunk_overlap, tokenizer=p.tokenizer
                )
            ]
            with d.lock:
                e0 = time.perf_counter()
                embedder.embed_documents(chunks)
                floors.append(args.debounce + time.perf_counter() - e0)
            name = f"new-{i}.txt"
            before = d.metrics.updates
            w0 = time.perf_counter()
            (folder / name).write_text(text)
            wait(lambda before=before: d.metrics.updates > before)
            with d.lock:
                assert store.count(
                    SearchFilter(tree=p.tree, source_prefix=name, max_layer=0)
                ) == len(chunks)
            latencies.append(time.perf_counter() - w0)
        print(
            f"file-to-searchable, {args.files} files of 10 chunks: p50 {statistics.median(latencies):.2f}s, "
            f"p90 {statistics.quantiles(latencies, n=10)[-1]:.2f}s; floor (debounce {args.debounce}s + "
            f"embedding) p50 {statistics.median(floors):.2f}s"
        )
        last = d.watcher.last_report if d.watcher else None
        if last is not None:
            print(f"  last update: {last.summary()}")

        burst = folder / "burst"
        burst.mkdir()
        b0 = time.perf_counter()
        for i in range(args.burst):
            (burst / f"b{i}.txt").write_text(f"Burst note {i}. " + prose(rng, 3))
        written = time.perf_counter() - b0

        def agrees() -> bool:
            with d.lock:
                state = d.watcher.state if d.watcher else None
                n = sum(1 for s in state.sources if s.startswith("burst/")) if state else 0
            return n == args.burst and d.pending() == 0

        wait(agrees)
        took = time.perf_counter() - b0
        print(
            f"burst of {args.burst} files (written in {written:.1f}s): tree equals folder after "
            f"{took:.1f}s ({args.burst / took:.0f} files/s) in {d.metrics.updates - args.files} batches"
        )
    finally:
        stop.set()
        t.join()
        store.close()

    # Build throughput over the same folder, from scratch.
    settings2 = Settings(_env_file=None, state_dir=tmp / "state2")  # type: ignore[call-arg]
    with EdgeNodeStore(settings2.state_dir / "qdrant") as store2:
        b0 = time.perf_counter()
        report = make_pipeline(settings2, store2, embedder).build(folder)
        took = time.perf_counter() - b0
    print(
        f"build of the same folder ({report.files} files, {report.leaves} leaves): {took:.1f}s "
        f"({report.files / took:.0f} files/s)"
    )
    print(f"peak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
