"""WorkerPool (ingestor/cluster/parallel.py): errors that name their task, small work kept in
this process, no worker outliving its parent; the ADRAP_BUILD__WORKERS setting."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from ingestor.cluster.parallel import WorkerPool, shared_pools, worker_count, worker_pool
from ingestor.config import Settings
from tests.conftest import interruptible, wait_until
from tests.unit.cluster.pool_tasks import die, fail_on_three, gated, square_after

ROOT = Path(__file__).resolve().parents[3]


def test_a_failed_task_is_named_and_the_pool_starts_again_after() -> None:
    pool = WorkerPool(2)
    try:
        with pytest.raises(ValueError, match="task 3 refused") as caught:
            pool.map(fail_on_three, range(6), count=6, rows=10**6, what=lambda i: f"square {i}")
        assert "while running the square 3 in a build worker process" in caught.value.__notes__
        assert not pool.started
        with pytest.raises(BrokenProcessPool) as broken:
            pool.map(die, range(2), count=2, rows=10**6, what=lambda i: f"task {i}")
        assert re.search(r"the task \d in a build worker process", broken.value.__notes__[0])
        assert pool.map(fail_on_three, range(3), count=3, rows=10**6, what=str) == [0, 1, 4]
    finally:
        pool.close()


def test_a_failed_task_does_not_wait_for_the_others(tmp_path: Path) -> None:
    pool = WorkerPool(2)
    jobs = [("fail", str(tmp_path)), ("hold", str(tmp_path))]
    try:
        with pytest.raises(ValueError, match="task 0 refused"):
            pool.map(gated, jobs, count=2, rows=10**6, what=str)
        # raised while the other task still held (it is never released): its worker was killed
        assert not (tmp_path / "finished").exists()
        assert not pool.started
        assert _wait_gone([int((tmp_path / "started").read_text())]) == []
    finally:
        pool.close(kill=True)


@pytest.mark.parametrize("scope", ["shared", "own"])
def test_an_error_between_results_stops_the_workers_at_once(scope: str, tmp_path: Path) -> None:
    # Raised by the consumer of a stream (Ctrl-C while it places a group's fit), not in the wait
    # for a result: the block that owns the pool stops its workers, not after their tasks.
    jobs = [("return", str(tmp_path)), ("hold", str(tmp_path))]

    def fail_at_the_first_result() -> None:
        shared = shared_pools() if scope == "shared" else contextlib.nullcontext()
        with shared, worker_pool(2) as pool:
            for _ in pool.stream(gated, jobs, count=2, rows=10**6, what=str):
                raise RuntimeError("consumer failed")

    with pytest.raises(RuntimeError, match="consumer failed"):
        fail_at_the_first_result()
    # the held task was never released: it ended with its killed worker, not by finishing
    assert not (tmp_path / "finished").exists()
    assert _wait_gone([int((tmp_path / "started").read_text())]) == []


def test_small_work_stays_in_this_process() -> None:
    pool = WorkerPool(4)
    assert pool.map(fail_on_three, range(3), count=3, rows=100, what=str) == [0, 1, 4]
    assert not pool.started


_PARENT = textwrap.dedent(
    """
    import multiprocessing, os, signal, sys, threading, time
    from ingestor.cluster.parallel import WorkerPool

    def nap(seconds):
        if seconds > 1:  # the long task: tell the test it has begun
            open(os.path.join(os.environ["NAPPING"], str(os.getpid())), "w").close()
        time.sleep(seconds)
        return seconds

    def interrupt_from_another_thread():
        if sys.stdin.readline():
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    if __name__ == "__main__":
        threading.Thread(target=interrupt_from_another_thread, daemon=True).start()
        pool = WorkerPool(2)
        pool.map(nap, [0.3, 0.3], count=2, rows=10**6, what=str)
        print(*[p.pid for p in multiprocessing.active_children()], flush=True)
        pool.map(nap, [600, 600], count=2, rows=10**6, what=str)
    """
)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited (its reaper may not wait for it)


def _workers_of_a_parent(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    (tmp_path / "napping").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NAPPING": str(tmp_path / "napping")}
    parent = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # a traceback at Ctrl-C, the killed parent's leaked semaphores
        text=True,
        env=env,
        preexec_fn=interruptible,  # the suite may run in a background job (SIGINT ignored)
    )
    assert parent.stdout is not None
    with parent.stdout:
        pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2, pids
    napping = tmp_path / "napping"
    wait_until(
        lambda: {int(p.name) for p in napping.iterdir()} == set(pids),
        timeout=60,
        what="both workers in their 600 s task",
    )
    return parent, pids


def _end(parent: subprocess.Popen[str]) -> None:
    parent.kill()
    parent.wait()
    if parent.stdin is not None:
        parent.stdin.close()


def _wait_gone(pids: list[int], within: float = 20.0) -> list[int]:
    deadline = time.monotonic() + within
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def test_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    parent, pids = _workers_of_a_parent(tmp_path)
    _end(parent)
    assert _wait_gone(pids) == []


@pytest.mark.parametrize("where", ["main", "other"])
def test_ctrl_c_stops_the_workers_without_waiting_for_their_tasks(
    tmp_path: Path, where: str
) -> None:
    # "other": the SIGINT lands in another of the parent's threads (the kernel may hand a
    # process-wide signal to any), leaving the main thread asleep on its futures' lock until a
    # task ends, unless it waits in slices (ingestor.waiting). The same sleep followed a SIGINT
    # landing just before the main thread blocked: CI runs on a busy machine hung on it.
    parent, pids = _workers_of_a_parent(tmp_path)
    try:
        if where == "main":
            parent.send_signal(signal.SIGINT)
        else:
            assert parent.stdin is not None
            parent.stdin.write("interrupt from another thread\n")
            parent.stdin.flush()
        assert parent.wait(timeout=30) != 0  # its 600 s tasks were not waited for
        assert _wait_gone(pids) == []
    finally:  # a failure here must not leave a parent running into the next test
        _end(parent)
        for pid in _wait_gone(pids, within=0):
            with contextlib.suppress(ProcessLookupError):  # it may exit meanwhile
                os.kill(pid, signal.SIGKILL)


def test_adrap_build_workers_sets_the_clusterers_workers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Unset or 0: every core the process may use; a count; never below 0."""
    cores = len(os.sched_getaffinity(0))
    assert worker_count(Settings(_env_file=None).build.workers) == cores  # type: ignore[call-arg]
    monkeypatch.setenv("ADRAP_BUILD__WORKERS", "0")
    assert worker_count(Settings(_env_file=None).build.workers) == cores  # type: ignore[call-arg]
    monkeypatch.setenv("ADRAP_BUILD__WORKERS", "3")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert worker_count(settings.build.workers) == 3
    from ingestor.cli.factories import make_pipeline
    from testkit.fakes import HashEmbedder

    settings = settings.model_copy(update={"state_dir": tmp_path})
    pipeline = make_pipeline(settings, store=None, embedder=HashEmbedder())  # type: ignore[arg-type]
    assert pipeline.context.builder.summaries.make_clusterer().workers == 3
    assert pipeline.context.builder.summaries.workers == 3  # its reads and extractive summaries
    monkeypatch.setenv("ADRAP_BUILD__WORKERS", "-1")
    with pytest.raises(ValueError, match=r"build\.workers"):
        Settings(_env_file=None)  # type: ignore[call-arg]


def test_imap_yields_in_task_order_as_it_goes_and_starts_only_for_enough_tasks() -> None:
    pool = WorkerPool(2)
    try:
        assert list(pool.imap(square_after, range(3), least=4, what=str)) == [0, 1, 4]
        assert not pool.started  # 3 tasks, fewer than least: read here
        drawn: list[int] = []

        def tasks() -> Iterator[int]:
            for i in range(100):
                drawn.append(i)
                yield i

        results = pool.imap(square_after, tasks(), least=4, what=str)
        assert [next(results) for _ in range(5)] == [0, 1, 4, 9, 16]
        assert pool.started
        assert len(drawn) < 20  # a few tasks ahead of the consumer, not the whole stream
        results.close()  # the consumer stops early: the pool stays, nothing more is drawn
        assert pool.started
        assert pool.map(square_after, range(4), count=4, rows=0, what=str) == [0, 1, 4, 9]
        with pytest.raises(ValueError, match="task 3 refused") as caught:
            list(pool.imap(fail_on_three, range(6), least=2, what=lambda i: f"file {i}"))
        assert "while running the file 3 in a build worker process" in caught.value.__notes__
    finally:
        pool.close()
