"""Shared fixtures: a clean ADRAP_* environment for every test (with the check of edits on);
``wait_until`` for real events."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ingestor.tree.rowmap import CHECK_EDITS_VARIABLE

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DATA = SHARED / "data"
TMPFS = Path("/dev/shm")


def pytest_configure(config: pytest.Config) -> None:
    """Check every commit of a tree's state for rows changed in place without ``edit()`` (see
    ``ingestor.tree.rowmap.CHECK_EDITS_VARIABLE``: such a change would be lost), in this process
    and those it starts; and put the tests' temporary folders on tmpfs where there is a roomy one
    (Linux).

    The stores sync every commit to disk; on a shared disk those syncs were most of the fast
    suite's time (a small tree built in 2 s there, 0.2 s on tmpfs). What the tests check does
    not change: a killed process loses nothing the page cache holds. ``--basetemp`` or a
    ``TMPDIR`` of one's own wins; a small /dev/shm (Docker's 64 MB) is left alone.
    """
    os.environ[CHECK_EDITS_VARIABLE] = "1"
    if config.option.basetemp or "TMPDIR" in os.environ or not os.access(TMPFS, os.W_OK):
        return
    if shutil.disk_usage(TMPFS).free >= 4 << 30:
        tempfile.tempdir = str(TMPFS)


#: What one test marked ``integration`` (daemons, servers, browsers, subprocesses) is reckoned to
#: cost against one unit test when the suite is spread over workers.
INTEGRATION_WEIGHT = 40


@pytest.hookimpl(trylast=True)  # after ``-m`` has deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, put the heavy test modules at the front of each worker's share.

    ``--dist worksteal`` gives each worker an equal, contiguous run of the collection and lets
    an idle worker steal the back half of another's queue. In file order every integration
    module fell in the first worker's run, whose last tests (a daemon with a real LLM, a killed
    repair: minutes each) could not be stolen and ran alone while the other workers sat idle at
    the end. :func:`spread` deals the integration modules (kept whole: their module fixtures
    build trees and start daemons) over the runs, heaviest first, each run's ahead of its unit
    tests, so what is left to steal at the end is short.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        items[:] = spread(items, workers)


def first_runs(n: int, workers: int) -> list[int]:
    """The sizes of the contiguous runs ``--dist worksteal`` first hands ``workers`` workers out
    of ``n`` tests: what is left, over the workers left."""
    sizes = []
    for i in range(workers):
        sizes.append(n // (workers - i))
        n -= sizes[-1]
    return sizes


def spread(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` reordered into ``workers`` runs of xdist's sizes (:func:`first_runs`), each
    starting with its share of the integration modules (by weight, heaviest first), then unit
    tests in file order; ``items`` unchanged if the heavy modules do not fit."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    weighed = [
        (sum(INTEGRATION_WEIGHT if i.get_closest_marker("integration") else 1 for i in m), m)
        for m in modules.values()
    ]
    light = [i for w, m in weighed if w == len(m) for i in m]
    runs: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for w, module in sorted((h for h in weighed if h[0] > len(h[1])), key=lambda h: -h[0]):
        least = loads.index(min(loads))
        runs[least] += module
        loads[least] += w
    sizes = first_runs(len(items), workers)
    if any(len(run) > size for run, size in zip(runs, sizes, strict=True)):
        return items
    start = 0
    for run, size in zip(runs, sizes, strict=True):
        take = size - len(run)
        run += light[start : start + take]
        start += take
    return [item for run in runs for item in run]


@pytest.fixture(autouse=True)
def clean_environ(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Strip ADRAP_* variables so a developer's shell never changes a test's outcome (but the
    check of edits, on for every test).

    The user's trees and settings file (XDG data and config homes) are empty folders of the test.
    """
    for key in list(os.environ):
        if key.startswith("ADRAP_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv(CHECK_EDITS_VARIABLE, "1")
    xdg = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_DATA_HOME", str(xdg / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return


def wait_until(predicate: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds.

    The only way a test waits for something another thread or process does (a real OS event, a
    server coming up): never a bare fixed sleep. The deadline is generous, since the CPU may be
    shared; a passing test waits only as long as the event takes.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout} s")
        time.sleep(0.02)


def interruptible() -> None:
    """``preexec_fn`` of a child a test sends Ctrl-C: SIGINT back to its default action. A shell
    without job control starts a background job (``make test &``) with SIGINT ignored, the
    ignoring is inherited down to the child, and Python then installs no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
