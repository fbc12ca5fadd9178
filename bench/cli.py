"""How fast the `adrap` command answers: a cold query, status, help, and a refused writer.

Builds examples/sample into a temporary state dir (the packaged model), then times fresh `adrap`
processes (wall clock, p50 of --runs) and their peak memory (each child's max RSS):

- `adrap query` with no daemon (cold: a new process each time; the OS file cache is warm);
- `adrap status` and `adrap --help`;
- `adrap add` of one new short file with no daemon (a writer's cold start: the model loaded on
  torch alone, placed by adRAP; no target);
- `adrap add` while `adrap watch` holds the state dir (refused: the lock names the daemon);
- `adrap query` answered by that daemon (for reference).

Targets (issue 37): cold query <= 3 s, status and help <= 0.5 s, refused add <= 1 s.

    python bench/cli.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ADRAP = [sys.executable, "-m", "ingestor"]
QUESTION = "Why did the fox call the grapes sour?"
TARGETS = {"query (no daemon)": 3.0, "status": 0.5, "--help": 0.5, "add refused": 1.0}


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Run ``adrap ARGS``; return wall seconds, the child's peak RSS (MiB) and its exit status."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*ADRAP, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def measure(
    name: str,
    args: list[str] | Callable[[int], list[str]],
    env: dict[str, str],
    runs: int,
    expect: int,
    out: dict[str, object],
) -> None:
    """Time ``runs`` fresh processes of ``args`` (or ``args(run)``, new arguments each run)."""
    walls, peaks = [], []
    for run in range(runs):
        argv = args(run) if callable(args) else args
        wall, peak, code = timed(argv, env)
        if code != expect:
            raise SystemExit(f"{name}: `adrap {' '.join(argv)}` exited {code}, not {expect}")
        walls.append(wall)
        peaks.append(peak)
    p50 = statistics.median(walls)
    target = TARGETS.get(name)
    ratio = f"{p50 / target:.2f}x target {target:g} s" if target else "(no target)"
    print(
        f"{name:<22} p50 {p50:6.2f} s  min {min(walls):6.2f}  max {max(walls):6.2f}  "
        f"peak RSS {max(peaks):5.0f} MiB  {ratio}"
    )
    out[name] = {"p50_s": round(p50, 3), "peak_rss_mib": round(max(peaks)), "target_s": target}


def wait_ready(state: Path, deadline: float) -> str:
    """Return the daemon's HTTP address once /readyz answers 200."""
    lock = state / "adrap.lock"
    while time.monotonic() < deadline:
        try:
            address = json.loads(lock.read_text()).get("http")
            if address:
                with urllib.request.urlopen(f"http://{address}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return str(address)
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit("adrap watch did not become ready")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="adrap-bench-cli-"))
    try:
        docs = tmp / "docs"
        shutil.copytree(REPO / "examples" / "sample", docs)
        state = tmp / "state"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")},
            "ADRAP_STATE_DIR": str(state),
            "XDG_CONFIG_HOME": str(tmp / "config"),
            "XDG_DATA_HOME": str(tmp / "data"),
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(REPO),
        }
        subprocess.run(
            [*ADRAP, "build", str(docs), "--no-progress"], env=env, check=True, capture_output=True
        )
        out: dict[str, object] = {}
        print(
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.runs} runs each"
        )
        measure("query (no daemon)", ["query", QUESTION], env, args.runs, 0, out)
        measure("status", ["status"], env, args.runs, 0, out)
        measure("--help", ["--help"], env, args.runs, 0, out)

        def new_file(run: int) -> list[str]:
            path = docs / f"note-{run}.txt"
            path.write_text(f"Note {run}: the grapes were sour, said the fox, and walked away.")
            return ["add", str(path)]

        measure("add 1 file (no daemon)", new_file, env, args.runs, 0, out)
        daemon = subprocess.Popen(
            [*ADRAP, "watch", str(docs), "--http-port", "0", "--no-progress"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_ready(state, time.monotonic() + 300)
            measure(
                "add refused", ["add", str(docs / "gettysburg-address.txt")], env, args.runs, 1, out
            )
            measure("query (via daemon)", ["query", QUESTION], env, args.runs, 0, out)
        finally:
            daemon.terminate()
            daemon.wait(60)
        print(json.dumps(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
