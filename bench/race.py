"""The symlink-swap race against builds and the daemon, for minutes (issue 57's target: 0 bytes
of any file outside the share indexed).

    python bench/race.py [--seconds 600] [--files 30]

A share's folder ``d/`` and a link ``x`` to a folder outside it (same file names, each holding a
secret) are exchanged with ``renameat2(RENAME_EXCHANGE)`` as fast as a thread can, while

- a daemon watches the share (native events, the hash embedder): the inside files are rewritten
  through a descriptor of the inside folder (wherever its name points now) and the share is
  rescanned, so it reads them again and again;
- the main thread builds the share again and again, each build in a fresh state dir.

Every text either one embeds is kept: prints how many contain the secret (target 0), with the
swaps, builds, daemon batches and texts embedded, and peak RSS. Needs Linux with renameat2.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from retriever import SearchFilter  # noqa: E402
from testkit.corpus import make_pipeline  # noqa: E402
from testkit.daemons import make_daemon  # noqa: E402
from testkit.fakes import CountingEmbedder  # noqa: E402
from testkit.race import SECRET, Swapper, racy_share  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--files", type=int, default=30)
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="adrap-race-"))
    share = racy_share(base / "s", args.files).resolve()
    inside = os.open(share / "d", os.O_RDONLY | os.O_DIRECTORY)  # follows the folder, not the name
    names = sorted(os.listdir(inside))

    watched = make_pipeline(base / "daemon")
    watched.build(share)
    daemon_texts: CountingEmbedder = watched.context.embedder  # type: ignore[assignment]
    d = make_daemon(watched, share, debounce=0.05, close_grace=0.02)
    stop = threading.Event()
    runner = threading.Thread(target=d.run, args=(stop,), name="daemon")
    runner.start()
    while not d.metrics.ready:
        time.sleep(0.05)

    build_texts: list[str] = []
    builds = rewrites = 0
    rng = random.Random(0)
    t0 = time.monotonic()
    with Swapper(share / "d", share / "x") as swapper:
        while time.monotonic() - t0 < args.seconds:
            for _ in range(5):  # the daemon reads these again (events), plus a rescan
                name = rng.choice(names)
                fd = os.open(name, os.O_WRONLY | os.O_TRUNC, dir_fd=inside)
                os.write(fd, f"inside text {rewrites} of the share\n".encode())
                os.close(fd)
                rewrites += 1
            assert d.watcher is not None
            d.watcher.enqueue([share])
            p = make_pipeline(base / f"build-{builds}")
            try:
                p.build(share)
            except Exception as exc:  # a build may find the folder gone mid-walk: not a leak
                print(f"  build {builds}: {type(exc).__name__}: {exc}")
            build_texts.extend(p.context.embedder.texts)  # type: ignore[attr-defined]
            p.context.store.close()
            builds += 1
        swaps = swapper.swaps
    stop.set()
    runner.join(120)
    leaked_daemon = sum(SECRET in t for t in daemon_texts.texts)
    leaked_build = sum(SECRET in t for t in build_texts)
    stored = watched.context.store.scroll(SearchFilter(tree=watched.context.tree), 100_000)[0]
    leaked_store = sum(SECRET in n.text for n in stored)
    took = time.monotonic() - t0
    print(
        f"race: {took:.0f} s, {swaps:,} swaps, {builds} builds ({len(build_texts):,} texts "
        f"embedded), daemon: {d.watcher.batches if d.watcher else 0} batches, "
        f"{len(daemon_texts.texts):,} texts embedded, {rewrites} rewrites"
    )
    print(
        f"outside texts indexed: builds {leaked_build}, daemon {leaked_daemon}, "
        f"in the daemon's store now {leaked_store} (target 0)"
    )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    os.close(inside)
    return 0 if leaked_build == leaked_daemon == leaked_store == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
