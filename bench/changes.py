"""The change log, measured (issue 55): reading "what changed since ..." from a long log beside a
big tree, and what keeping the log costs each commit.

    python bench/changes.py [--nodes 100000] [--records 10000] [--reads 200]

A state database with ``--nodes`` node rows (about 1 KB each, as a tree's) and ``--records``
change records (each of 1-20 files over 50 access classes and 5-40 summaries, one a minute back
from now) is written once. Then, ``--reads`` times each:

- **owner, newest 50**: ``ChangeFeed.changes({"since": "30d"})`` as the owner (the default limit);
- **owner, since 2d**: the records of the last two days (up to the limit of 1,000);
- **reader of 5 classes, newest 50**: a restricted caller, who sees a tenth of the records;
- **floor**: SQLite reading the same 50 newest rows by key, no decoding (what no reader beats).

And per commit: the bytes a record adds, and :func:`~ingestor.tree.changelog.prune`'s cost when
nothing is due (every commit pays it) and when a day's records age out.

Target (issue 55): ``adrap changes`` at 100k nodes and 10,000 records, p50 <= 50 ms. Prints p50 and
p95 (ms), the ratio to the floor, and peak RSS.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ingestor.answer.changes import ChangeFeed  # noqa: E402
from ingestor.read.access_classes import ClassRegistry, Identity  # noqa: E402
from ingestor.tree import changelog  # noqa: E402
from ingestor.tree.changelog import (  # noqa: E402
    ChangeRecord,
    FileChange,
    Retention,
    SummaryChange,
)
from models_store import Changes, RowStore  # noqa: E402

CLASSES = [f"c{i:02d}" for i in range(50)]


def make_db(path: Path, nodes: int, records: int, now: float) -> RowStore:
    rows = RowStore(path, create=True)
    rng = random.Random(0)
    ch = Changes()
    for i in range(nodes):
        ch.set("node", f"{i:08d}", rng.randbytes(1000))
        if len(ch.put) >= 20_000:
            rows.commit(ch)
            ch = Changes()
    rows.commit(ch)
    batch: list[ChangeRecord] = []
    for i in range(records):
        at = now - 60.0 * (records - i)
        files = [
            FileChange(
                f"team{rng.randrange(50)}/doc{rng.randrange(10**6)}.md",
                rng.choice(["added", "edited", "removed"]),
                rng.choice(CLASSES),
                "alice",
            )
            for _ in range(rng.randint(1, 20))
        ]
        summaries = [
            SummaryChange(f"{rng.getrandbits(128):032x}", rng.randint(1, 3), (rng.choice(CLASSES),))
            for _ in range(rng.randint(5, 40))
        ]
        batch.append(ChangeRecord(at=at, kind="update", files=files, summaries=summaries))
        if len(batch) == 1000:
            ch = Changes()
            changelog.gather(batch, i, ch)
            rows.commit(ch)
            batch = []
    if batch:
        ch = Changes()
        changelog.gather(batch, records, ch)
        rows.commit(ch)
    return rows


def timed(fn: object, n: int) -> tuple[float, float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) * 1000)
    out.sort()
    return statistics.median(out), out[int(0.95 * (len(out) - 1))]


class _Registry(ClassRegistry):
    """Five classes readable by the bench's reader (the rest by nobody it knows)."""

    def __init__(self, readable: tuple[str, ...]) -> None:
        super().__init__(None)
        self._fixed = readable

    def readable(self, who: Identity) -> tuple[str, ...] | None:
        return None if who.unrestricted else self._fixed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--reads", type=int, default=200)
    args = ap.parse_args()
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = Path(tmp) / "state.sqlite"
        make_db(path, args.nodes, args.records, now).close()
        print(
            f"state: {args.nodes} node rows, {args.records} records, "
            f"{path.stat().st_size / 2**20:.0f} MiB, written in {time.perf_counter() - t0:.1f} s"
        )
        rows = RowStore(path, readonly=True)
        reader = Identity("user:bench", uid=4242)
        feed = ChangeFeed(lambda: rows, "t", classes=_Registry(tuple(CLASSES[:5])))
        cases = {
            "owner, newest 50": lambda: feed.changes({"since": "30d"}),
            "owner, since 2d (<= 1000)": lambda: feed.changes({"since": "2d", "limit": "1000"}),
            "reader of 5 classes, newest 50": lambda: feed.changes({"since": "30d"}, reader),
            "floor: 50 rows by key": lambda: rows.items_range(
                changelog.NS, limit=50, descending=True
            ),
        }
        results = {name: timed(fn, args.reads) for name, fn in cases.items()}
        floor = results["floor: 50 rows by key"][0]
        print(f"{'read':<34} {'p50 ms':>8} {'p95 ms':>8} {'x floor':>8}")
        for name, (p50, p95) in results.items():
            print(f"{name:<34} {p50:8.2f} {p95:8.2f} {p50 / floor:8.1f}")
        seen = feed.changes({"since": "30d"}, reader)["records"]
        print(
            f"the reader's newest 50: {len(seen)} records, {sum(len(r['files']) for r in seen)} files"
        )
        rows.close()

        writer = RowStore(path)
        ch = Changes()
        record = ChangeRecord(
            at=now, kind="update", files=[FileChange("a/b.md", "edited", "c00", "alice")] * 5
        )
        changelog.gather([record], 10**9, ch)
        print(f"a record of 5 files: {sum(len(v) for v in ch.put.values())} bytes")
        keep = Retention(keep_records=args.records + 10, keep_days=30)
        idle = timed(lambda: changelog.prune(writer, keep), args.reads)
        print(f"prune, nothing due (every commit): p50 {idle[0]:.3f} ms")
        t0 = time.perf_counter()
        gone = changelog.prune(writer, Retention(keep_records=args.records, keep_days=6))
        print(
            f"prune of the records past 6 days: {gone} in {(time.perf_counter() - t0) * 1000:.1f} ms"
        )
        writer.close()
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
