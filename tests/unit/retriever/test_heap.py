"""A process's threads share a few glibc heaps (arenas), not one each."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from ingestor.cluster.parallel import WorkerPool
from retriever.heap import HEAP_ARENAS
from tests.unit.cluster import pool_tasks

ROOT = Path(__file__).resolve().parents[3]
#: Counts the heaps once six more threads have allocated (as a build worker does, below), in a
#: fresh process: with the limit set first ("limit") or not.
THREADS = """
import sys
from retriever.heap import limit_heap_arenas
from tests.unit.cluster.pool_tasks import heap_arenas
if sys.argv[1] == "limit":
    assert limit_heap_arenas()
print(heap_arenas(0))
"""

glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="arenas are glibc's (musl and macOS have none)"
)


def arenas(*args: str, env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        [sys.executable, "-c", THREADS, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | (env or {}),
    )
    return int(done.stdout)


@glibc
def test_limited_threads_share_the_set_number_of_heaps() -> None:
    assert arenas("none") >= 6  # glibc's default: a heap per thread (up to 8 per core)
    assert arenas("limit") == HEAP_ARENAS


@glibc
def test_a_malloc_arena_max_the_user_set_is_left_to_rule() -> None:
    assert arenas("none", env={"MALLOC_ARENA_MAX": "3"}) == 3
    done = subprocess.run(
        [sys.executable, "-c", "from retriever.heap import limit_heap_arenas as f; print(f())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=os.environ | {"MALLOC_ARENA_MAX": "3"},
    )
    assert done.stdout.strip() == "False"


@glibc
def test_build_workers_limit_their_heaps() -> None:
    pool = WorkerPool(2)
    try:
        counts = pool.map(pool_tasks.heap_arenas, [0, 1], count=2, rows=1 << 20, what=str)
    finally:
        pool.close()
    assert counts == [HEAP_ARENAS, HEAP_ARENAS]


def test_a_tree_build_limits_the_heaps(monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestor.cluster.two_step import TreeClusterer
    from ingestor.tree import build
    from ingestor.tree.state import TreeState
    from testkit.fakes import EchoSummarizer, HashEmbedder

    calls: list[str] = []
    monkeypatch.setattr(build, "limit_heap_arenas", lambda: calls.append("build") or True)
    builder = build.TreeBuilder(
        HashEmbedder(dim=8), EchoSummarizer(), TreeClusterer, build.TreeParams()
    )
    builder.build(TreeState(tree="t", root=".", embed_model="hash", dim=8))
    assert calls == ["build"]


def test_the_daemon_limits_its_heaps_before_it_starts_threads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import threading

    from ingestor.service import daemon
    from testkit.corpus import make_pipeline
    from testkit.daemons import make_daemon

    threads: list[int] = []
    monkeypatch.setattr(
        daemon, "limit_heap_arenas", lambda: threads.append(threading.active_count()) or True
    )
    root = tmp_path / "share"
    root.mkdir()
    stop = threading.Event()
    stop.set()  # it stops as soon as it has started
    make_daemon(make_pipeline(tmp_path), root).run(stop)
    assert threads == [threading.active_count()]  # called once, before any thread of its own
