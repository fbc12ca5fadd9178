"""A daemon whose disk fills up: does it stay up, keep answering, lose nothing, and catch up?

    sudo python bench/disk_full.py [--size-mb 600] [--timeout 120]

Needs root (it mounts a tmpfs of ``--size-mb`` as the state dir). Starts ``adrap watch`` (the
packaged model) over a copy of ``examples/sample``, lets it settle, fills the tmpfs until less than
the reserve (``ADRAP_MIN_FREE_MB``, 256 MiB) is free, drops a file with a unique word into the share, then:
is the daemon alive, does ``/status`` say the updates wait, how fast does ``/query`` answer
meanwhile; frees the space and times how long the held file takes to be searchable. Before the
reserve, the daemon's first write on such a disk ended it with SIGBUS.
**Floor**: the same file dropped with room to spare (its searchable time on the same daemon).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile import Sampler, Watch, rss_kb, sample_share, searchable

RESERVE_MB = 256  # ADRAP_MIN_FREE_MB's default, which the daemon runs with


def fill(mount: Path, leave_mb: int) -> Path:
    """Fill ``mount`` until ``leave_mb`` MiB are free; return the filler file."""
    path = mount / "filler"
    free = shutil.disk_usage(mount).free - leave_mb * (1 << 20)
    with path.open("ab") as f:
        f.write(b"\0" * max(0, free))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=600)
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root: it mounts a tmpfs as the state dir")
        return 2
    base, share, mount = sample_share("adrap-disk-full-", "disk")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.size_mb}m", "tmpfs", str(mount)])
    w: Watch | None = None
    try:
        w = Watch(share, mount / "state")
        sampler = Sampler(w)
        sampler.start()
        floor_word = "zqfloorfile"
        (share / "floor.txt").write_text(f"The {floor_word} note is about the garden.\n")
        floor = searchable(w, floor_word, "floor.txt", a.timeout)
        filler = fill(mount, RESERVE_MB // 2)
        print(f"filled: {shutil.disk_usage(mount).free >> 20} MiB free of {a.size_mb}")
        word = "zqheldfile"
        (share / "held.txt").write_text(f"The {word} note is about the weekly meeting.\n")
        time.sleep(5)
        status = json.loads(w.get("/status")[1])
        t0 = time.perf_counter()
        code, _ = w.get("/query?q=liberty&max_tokens=500")
        query_s = time.perf_counter() - t0
        alive = w.proc.poll() is None
        print(
            f"while full: daemon alive {alive}, writes_wait {status['disk']['writes_wait']}, "
            f"pending {status['pending_events']}, /query {code} in {query_s * 1000:.0f} ms, "
            f"searchable {searchable(w, word, 'held.txt', 2) is not None}"
        )
        filler.unlink()
        t0 = time.monotonic()
        found = searchable(w, word, "held.txt", a.timeout)
        took = f"{found:.1f} s" if found is not None else f">{a.timeout:.0f} s"
        floor_s = f"{floor:.1f} s" if floor is not None else "-"
        ratio = f"{found / floor:.1f}x" if found and floor else "-"
        print(
            f"room again -> held file searchable in {took} (floor: a file with room {floor_s}; "
            f"{ratio}); daemon peak RSS {sampler.peak / 1024:.0f} MiB, now "
            f"{rss_kb(w.proc.pid) / 1024:.0f} MiB, /healthz max {sampler.slowest:.2f} s"
        )
        sampler.stop.set()
        return 0 if alive and found is not None else 1
    finally:
        if w is not None:
            w.proc.terminate()
            w.proc.wait(120)
        subprocess.run(["umount", "-l", str(mount)])
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
