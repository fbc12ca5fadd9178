"""Tasks for WorkerPool tests: a worker imports this module to run them, so it imports nothing
heavy (a worker importing a test module would import its fixtures' libraries too)."""

from __future__ import annotations

import os
from pathlib import Path


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


def _wait_for(path: Path, limit: float) -> bool:
    """Whether ``path`` appeared within ``limit`` seconds."""
    import time

    deadline = time.monotonic() + limit
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def gated(job: tuple[str, str]) -> str:
    """One of two tasks that meet through files in a folder (``job``: (role, folder)).

    ``hold`` writes its process id to ``started``, then waits for a ``release`` file no test
    writes: it writes ``finished`` only if its worker was left to wait a minute for it. ``fail``
    and ``return`` wait until ``hold`` has started, then raise ``ValueError("task 0 refused")`` or
    return: a pool that waits for the held task before it raises or returns shows as ``finished``.
    """
    role, where = job
    folder = Path(where)
    if role == "hold":
        (folder / "started.tmp").write_text(str(os.getpid()))
        (folder / "started.tmp").rename(folder / "started")  # whole, for a reader polling it
        _wait_for(folder / "release", 60)
        (folder / "finished").touch()
        return role
    if not _wait_for(folder / "started", 60):
        raise RuntimeError("the held task never started")
    if role == "fail":
        raise ValueError("task 0 refused")
    return role
