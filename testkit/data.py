"""Where the evaluation data lives, and a process's memory figures: the parts of
bench/datasets.py that the soak (testkit/soak_ops.py) shares with the tests."""

from __future__ import annotations

import os
from pathlib import Path

#: The evaluation data: the folder ADRAP_BENCH_DATA names, else shared/data beside the checkout.
SHARED = Path(
    os.environ.get("ADRAP_BENCH_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
SQUAD = SHARED / "squad" / "squad-v1.1-dev-part-a.json"
HOTPOT = SHARED / "hotpotqa" / "hotpot-dev-distractor-part-a.json"


def proc_status_mb(pid: int | str = "self") -> dict[str, float]:
    """The memory figures of ``/proc/PID/status`` in MiB: ``VmRSS`` (resident now), ``VmHWM``
    (its peak), ``RssAnon`` (anonymous: heap) and ``RssFile`` (mapped files, which the kernel
    may drop), ...

    Raises:
        OSError: no such process (it may just have exited).
    """
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if value.endswith(" kB"):
            out[name] = int(value.split()[0]) / 1024
    return out
