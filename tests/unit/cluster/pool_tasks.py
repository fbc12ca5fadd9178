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


def heap_arenas(i: int) -> int:
    """Return the glibc heaps (arenas) this process has once six more threads have allocated."""
    import ctypes
    import tempfile
    import threading

    barrier = threading.Barrier(6)

    def work() -> None:
        held = [bytearray(50_000) for _ in range(20)]  # under the mmap threshold: an arena's
        barrier.wait()
        del held

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with tempfile.TemporaryFile("w+") as out:  # malloc_stats writes to fd 2
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            ctypes.CDLL(None).malloc_stats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        return sum(line.startswith("Arena ") for line in out)


def fail_or_nap(i: int) -> int:
    """Task 0 fails after a moment; every other task naps for a minute."""
    import time

    if i == 0:
        time.sleep(0.5)  # the other task is running by now
        raise ValueError("task 0 refused")
    time.sleep(60)
    return i


def nap(seconds: float) -> float:
    """Return ``seconds`` after sleeping that long."""
    import time

    time.sleep(seconds)
    return seconds
