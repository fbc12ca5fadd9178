"""Memory of a watcher per tree size: peak RSS of a full build and the RSS it keeps afterwards.

    python bench/memory.py [--sizes 20000 100000] [--workers N]

Each size runs in a fresh process: synthetic documents from SQuAD sentences, hashed 384-d
embeddings (the same vector size as the default model, without its ~20 chunks/s), extractive
summaries, the embedded qdrant-edge store. Printed per size: leaves, build seconds, RSS before the
build (imports), peak RSS, RSS after the build (what a watcher holds while idle; ``--one`` also
prints its heap and mapped-file parts), the state dir on disk, and the peak of this process's RSS
plus its build workers' (``--workers``: the clustering's processes, sampled every 0.2 s; 1, the
default, starts none). Add the real embedding model's
resident size (measured here: printed as "model") for a watcher with the default backend. The
floor is the raw vectors: leaves x 384 x 4 bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def _rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory (MiB): all of it, or ``RssAnon`` (heap) / ``RssFile``
    (mapped files: the embedded store's segments, the kernel may drop them)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _with_workers_mb() -> float:
    """RSS of this process and its child processes (the build workers), MiB."""
    pids = ["self"] + [
        p for t in Path("/proc/self/task").iterdir() for p in (t / "children").read_text().split()
    ]
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):  # a worker that just exited
            status = Path(f"/proc/{pid}/status").read_text()
            total += int(status.split("VmRSS:")[1].split()[0]) / 1024
    return total


def _du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def one(size: int, workers: int = 1) -> dict[str, float]:
    """Build one synthetic tree of about ``size`` leaves in this process; return its figures."""
    import threading

    import update
    from datasets import peak_rss_mb
    from update import CountingSummarizer, pipeline, synthetic_docs

    from tests.fakes import HashEmbedder

    update.WORKERS = workers
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "docs"
        synthetic_docs(root, size, random.Random(0))
        p = pipeline(Path(tmp) / "state", HashEmbedder(dim=384), CountingSummarizer())
        before = _rss_mb()
        peak_all, done = [0.0], threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                peak_all[0] = max(peak_all[0], _with_workers_mb())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        p.build(root)
        seconds = time.perf_counter() - t0
        done.set()
        sampler.join()
        leaves = len(p.require_state().ids_in_layer(0))
        after = _rss_mb()
        after_anon, after_file = _rss_mb("RssAnon"), _rss_mb("RssFile")
        disk = _du_mb(Path(tmp) / "state")
        p.store.close()
    return {
        "leaves": leaves,
        "seconds": seconds,
        "rss_before": before,
        "rss_peak": peak_rss_mb(),
        "rss_after": after,
        "rss_after_anon": after_anon,
        "rss_after_file": after_file,
        "disk": disk,
        "rss_peak_with_workers": max(peak_all[0], peak_rss_mb()),
    }


def model_mb() -> float:
    """Resident size added by loading the default embedding model and embedding once."""
    from retriever import SentenceTransformerEmbedder

    before = _rss_mb()
    SentenceTransformerEmbedder().embed_documents(["warm up"] * 32)
    return _rss_mb() - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    ap.add_argument(
        "--workers", type=int, default=1, help="build worker processes (default 1: none started)"
    )
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--model", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.workers)))
        return
    if args.model:
        print(json.dumps({"model": model_mb()}))
        return

    def child(*flags: str) -> dict[str, float]:
        out = subprocess.run(
            [sys.executable, __file__, *flags], capture_output=True, text=True, check=True
        ).stdout
        result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
        return result

    print(f"default embedding model resident: {child('--model')['model']:.0f} MiB")
    print(
        f"{'leaves':>8} {'build s':>8} {'RSS start':>9} {'peak':>7} {'after':>7} "
        f"{'kept/100k':>9} {'disk MiB':>8} {'floor MiB':>9} {'+workers':>8}"
    )
    for size in args.sizes:
        r = child("--one", str(size), "--workers", str(args.workers))
        kept = (r["rss_after"] - r["rss_before"]) * 100_000 / r["leaves"]
        floor = r["leaves"] * 384 * 4 / 2**20
        print(
            f"{r['leaves']:8.0f} {r['seconds']:8.1f} {r['rss_before']:9.0f} {r['rss_peak']:7.0f} "
            f"{r['rss_after']:7.0f} {kept:9.0f} {r['disk']:8.0f} {floor:9.0f} "
            f"{r['rss_peak_with_workers']:8.0f}"
        )


if __name__ == "__main__":
    main()
