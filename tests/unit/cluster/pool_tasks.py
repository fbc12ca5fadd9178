"""Tasks for WorkerPool tests: a worker imports this module to run them, so it imports nothing
heavy (a worker importing a test module would import its fixtures' libraries too)."""

from __future__ import annotations

import os


def fail_on_three(i: int) -> int:
    """Return i squared, except for 3."""
    if i == 3:
        raise ValueError(f"task {i} refused")
    return i * i


def die(i: int) -> int:
    """End the worker process at once, as the kernel's OOM killer would."""
    os._exit(3)


def square_after(i: int) -> int:
    """Return i squared after a short nap (so results come while later tasks are drawn)."""
    import time

    time.sleep(0.01)
    return i * i
