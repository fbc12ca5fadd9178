"""Watcher daemon benchmark (in-process daemon, real embedding model, extractive summaries).

Part 1, file-to-searchable latency: ~10-chunk files created one at a time in a watched folder;
latency = file written → its leaves found in the store by a query (they are written before adRAP
places them), and → its update committed (summaries placed). p50/p90 over
``--files`` files, against the floor: the close grace (a file written and closed ends its burst
after it, not after the debounce) plus embedding those chunks alone.

Part 2, burst: ``--burst`` small files created at once; time until the tree equals the folder,
against building the same folder from scratch (build throughput).

Part 3, ``/query`` over HTTP: p50/p95 while idle, then while an update of ``--update-files``
ten-chunk files runs (about a minute of embedding on 2 cores); the target is "during <= 2x idle".
Each query's time is broken down (in process): embedding the question (wall and CPU), waiting for
the store's lock, store calls; a wall far above the CPU means it waited for a core.

Part 4, restart scan: ``--restart-files`` unchanged small files against a source index that
matches them; seconds and bytes read by the rescan (target: 0 bytes), against reading every file
(what reconciliation did before).

    python bench/watch.py [--files 20] [--burst 500] [--debounce 1.0] [--close-grace 0.2]
        [--writer-nice 10] [--update-files 300] [--restart-files 10000]
        [--parts latency,burst,query,restart]
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
from query_breakdown import Breakdown

from ingestor.cli.factories import make_daemon_parts, make_embedder, make_pipeline
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
                text,
                max_tokens=p.build_stage.chunk_tokens,
                overlap=p.build_stage.chunk_overlap,
                tokenizer=p.build_stage.tokenizer,
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


def http_query(base: str, q: str) -> float:
    import urllib.parse
    import urllib.request

    t0 = time.perf_counter()
    url = f"{base}/query?" + urllib.parse.urlencode({"q": q, "max_tokens": 500})
    with urllib.request.urlopen(url, timeout=120) as resp:
        resp.read()
    return time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def query_during_update(d: Daemon, p: Pipeline, folder: Path, n_files: int) -> None:
    """/query p50/p95 idle, then while an update of ``n_files`` ten-chunk files runs."""
    assert d.address is not None
    base = "http://{}:{}".format(*d.address)
    rng = random.Random(1)
    words = ["orchard cider", "rocket launch", "violin concert", "river bridge", "copper engine"]
    http_query(base, "warm up")
    parts = Breakdown(d)
    c0 = time.process_time()
    idle = [http_query(base, rng.choice(words)) for _ in range(60)]
    idle_cpu = (time.process_time() - c0) / len(idle)
    idle_rows = parts.take()
    texts = [ten_chunk_text(rng, p) for _ in range(n_files)]
    upd = folder / "update"
    upd.mkdir()
    before = d.metrics.updates
    u0 = time.perf_counter()
    for i, text in enumerate(texts):
        (upd / f"u{i}.txt").write_text(text)
    during: list[float] = []
    c0 = time.process_time()
    while d.metrics.updates == before or d.pending() > 0:
        during.append(http_query(base, rng.choice(words)))
        time.sleep(0.05)
    took = time.perf_counter() - u0
    update_cpu = time.process_time() - c0
    during_rows = parts.take()
    print(
        f"/query over HTTP, idle: p50 {pct(idle, 0.5) * 1000:.0f} ms, p95 {pct(idle, 0.95) * 1000:.0f} ms"
        f" ({len(idle)} queries, process CPU {idle_cpu * 1000:.0f} ms a query)"
    )
    print(
        f"/query during a {took:.0f}s update of {n_files} files ({n_files * 10} chunks; process "
        f"CPU {update_cpu:.0f}s): p50 {pct(during, 0.5) * 1000:.0f} ms, p95 "
        f"{pct(during, 0.95) * 1000:.0f} ms ({len(during)} queries); ratio p50 during/idle "
        f"{pct(during, 0.5) / pct(idle, 0.5):.1f}x (target <= 2x)"
    )
    print(Breakdown.line("idle", idle_rows))
    print(Breakdown.line("during", during_rows))
    print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def restart_scan(n_files: int) -> None:
    """Rescan ``n_files`` unchanged files against a matching source index: seconds, bytes read."""
    import ingestor.read.documents as documents
    from ingestor.pipeline import UpdateReport
    from ingestor.tree.state import SourceEntry, TreeState

    tmp = Path(tempfile.mkdtemp(prefix="adrap-bench-restart-"))
    root = tmp / "docs"
    rng = random.Random(2)
    for i in range(n_files):
        sub = root / f"dir{i // 500}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}.txt").write_text(prose(rng, 4))
    settings = Settings(_env_file=None, state_dir=tmp / "state")  # type: ignore[call-arg]
    state = TreeState(tree="default", root=str(root.resolve()), embed_model="x", dim=1)
    for f in root.rglob("*.txt"):
        st = f.stat()
        state.sources[f.relative_to(root).as_posix()] = SourceEntry(
            "", st.st_size, st.st_mtime, [], st.st_mtime_ns, st.st_ino
        )
    total = sum(f.stat().st_size for f in root.rglob("*.txt"))
    read = [0, 0]
    real = documents._read_bytes

    def counting(path: Path, name: str, max_bytes: int) -> tuple[bytes, os.stat_result]:
        data, st = real(path, name, max_bytes)
        read[0] += 1
        read[1] += len(data)
        return data, st

    documents._read_bytes = counting  # type: ignore[assignment]
    try:
        embedder = make_embedder(settings)
        with EdgeNodeStore(settings.state_dir / "qdrant") as store:
            p = make_pipeline(settings, store, embedder)
            t0 = time.perf_counter()
            docs, gone = p.collect(state, [root.resolve()], UpdateReport())
            scan = time.perf_counter() - t0
            t0 = time.perf_counter()
            n = sum(1 for _, item in documents.iter_documents(root, max_bytes=10**8))
            full = time.perf_counter() - t0
    finally:
        documents._read_bytes = real
    print(
        f"restart scan of {n_files} unchanged files: {scan:.2f}s, {len(docs)} changed, "
        f"{len(gone)} gone, files read {read[0] - n}, bytes read {read[1] - total} (target 0); "
        f"reading them all as before: {full:.2f}s, {total:,} bytes ({full / scan:.1f}x the scan)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--debounce", type=float, default=1.0)
    ap.add_argument(
        "--close-grace", type=float, default=0.2, help="ADRAP_WATCH__CLOSE_GRACE_SECONDS"
    )
    ap.add_argument("--writer-nice", type=int, default=10, help="ADRAP_WATCH__WRITER_NICE")
    ap.add_argument("--update-files", type=int, default=300)
    ap.add_argument("--restart-files", type=int, default=10_000)
    ap.add_argument("--parts", default="latency,burst,query,restart")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    logging.basicConfig(level=logging.WARNING)
    if "restart" in parts:
        restart_scan(args.restart_files)
        if parts == {"restart"}:
            print(f"peak RSS {peak_rss_mb():.0f} MB")
            return

    tmp = Path(tempfile.mkdtemp(prefix="adrap-bench-watch-"))
    folder = tmp / "docs"
    folder.mkdir()
    for f in (ROOT / "examples" / "sample").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    base = Settings(_env_file=None, state_dir=tmp / "state")  # type: ignore[call-arg]
    watch = base.watch.model_copy(
        update={
            "debounce_seconds": args.debounce,
            "close_grace_seconds": args.close_grace,
            "writer_nice": args.writer_nice,
            "http_port": 0,
            "socket": False,
            "polling": False,
        }
    )
    settings = base.model_copy(update={"watch": watch})
    store = EdgeNodeStore(settings.state_dir / "qdrant")
    embedder = make_embedder(settings)
    d = Daemon(make_daemon_parts(settings, store, embedder, owner_token=None), folder, settings)
    p = d.pipeline
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t0 = time.perf_counter()
    t.start()
    wait(lambda: d.metrics.ready)
    print(f"start-up (first run = build of examples/sample): {time.perf_counter() - t0:.1f}s")

    rng = random.Random(0)
    latencies: list[float] = []
    committed: list[float] = []
    floors: list[float] = []
    try:
        if "query" in parts:
            query_during_update(d, p, folder, args.update_files)
        for i in range(args.files if "latency" in parts else 0):
            text = ten_chunk_text(rng, p)
            chunks = [
                c.text
                for c in chunk_text(
                    text,
                    max_tokens=p.build_stage.chunk_tokens,
                    overlap=p.build_stage.chunk_overlap,
                    tokenizer=p.build_stage.tokenizer,
                )
            ]
            with d.lock:
                e0 = time.perf_counter()
                embedder.embed_documents(chunks)
                floors.append(min(args.close_grace, args.debounce) + time.perf_counter() - e0)
            name = f"new-{i}.txt"
            before = d.metrics.updates
            flt = SearchFilter(tree=p.context.tree, source_prefix=name, max_layer=0)
            n_chunks = len(chunks)
            w0 = time.perf_counter()
            (folder / name).write_text(text)
            # Searchable: a query (the store's short lock, as /query takes it) finds every leaf.
            wait(lambda flt=flt, n=n_chunks: d.store.count(flt) == n)
            latencies.append(time.perf_counter() - w0)
            wait(lambda before=before: d.metrics.updates > before)
            committed.append(time.perf_counter() - w0)
        if latencies:
            print(
                f"file-to-searchable, {args.files} files of 10 chunks: p50 "
                f"{statistics.median(latencies):.2f}s, p90 "
                f"{statistics.quantiles(latencies, n=10)[-1]:.2f}s; floor (close grace "
                f"{min(args.close_grace, args.debounce)}s + embedding) p50 "
                f"{statistics.median(floors):.2f}s; update "
                f"committed (summaries placed) p50 {statistics.median(committed):.2f}s, p90 "
                f"{statistics.quantiles(committed, n=10)[-1]:.2f}s"
            )
        last = d.watcher.last_report if d.watcher else None
        if last is not None:
            print(f"  last update: {last.summary()}")

        if "burst" not in parts:
            return
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
