"""wait_interruptibly (ingestor/waiting.py): concurrent.futures.wait's answers, and a Ctrl-C
raised while futures run even when its signal landed in another thread."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, ThreadPoolExecutor
from pathlib import Path

from ingestor.waiting import wait_interruptibly
from tests.conftest import interruptible

ROOT = Path(__file__).resolve().parents[2]


def test_it_answers_as_concurrent_futures_wait_does() -> None:
    release = threading.Event()
    with ThreadPoolExecutor(3) as executor:
        quick = executor.submit(time.sleep, 0.3)  # longer than a slice: the loop goes round
        held = executor.submit(release.wait)
        done, not_done = wait_interruptibly([quick, held], FIRST_COMPLETED)
        assert (done, not_done) == ({quick}, {held})

        failing = executor.submit(_fail_after, 0.3)
        done, not_done = wait_interruptibly([failing, held], FIRST_EXCEPTION)
        assert (done, not_done) == ({failing}, {held})

        releaser = threading.Timer(0.3, release.set)
        releaser.start()
        done, not_done = wait_interruptibly([quick, held], ALL_COMPLETED)
        assert (done, not_done) == ({quick, held}, set())
        releaser.join()


def _fail_after(seconds: float) -> None:
    time.sleep(seconds)
    raise ValueError("failed")


_WAITER = textwrap.dedent(
    """
    import signal, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from ingestor.waiting import wait_interruptibly

    def asleep_in_the_wait():  # the main thread blocked on a lock inside wait_interruptibly
        frame = sys._current_frames().get(threading.main_thread().ident)
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        return names[:1] == ["wait"] and "wait_interruptibly" in names

    def interrupt_from_this_thread():
        while not asleep_in_the_wait():
            time.sleep(0.01)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    executor = ThreadPoolExecutor(1)
    future = executor.submit(time.sleep, 600)
    threading.Thread(target=interrupt_from_this_thread, daemon=True).start()
    try:
        wait_interruptibly([future])
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        import os
        os._exit(0)  # not waiting for the executor's 600 s task
    """
)


def test_a_ctrl_c_handled_in_another_thread_is_raised_in_the_waiting_one(tmp_path: Path) -> None:
    script = tmp_path / "waiter.py"
    script.write_text(_WAITER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        preexec_fn=interruptible,  # the suite may run in a background job (SIGINT ignored)
    )
    assert (run.returncode, run.stdout) == (0, "interrupted\n"), run.stderr
