"""The daemon as an unprivileged user on a share where some files and a folder cannot be read:
nothing is deleted, the status says why, and access restored brings the files back in.

Root reads every file, so the daemon runs as ``nobody`` (setpriv); the test needs root to switch
and to take permissions away. Real parts throughout: `adrap watch`, the packaged model, qdrant-edge.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.numba_cache import numba_cache_for
from tests.integration.test_daemon import get, text_of, wait_for

NOBODY = 65534


def _nobody_runs_python() -> bool:
    """Whether uid 65534 may run this Python, and start it again as the daemon's reader processes
    do (a venv whose interpreter lives under a private home, e.g. pyenv's under a 0700 /root,
    is run once by setpriv but cannot be exec'd again by the process it became)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    again = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    probe = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         sys.executable, "-c", again],
        capture_output=True,
    )  # fmt: skip
    return probe.returncode == 0


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not _nobody_runs_python(),
        reason="needs root, setpriv, and a Python that uid 65534 may run (this one: "
        f"{sys.executable}) to run the daemon as an unprivileged user",
    ),
]
#: The owner's token: /status names the files (stale, skipped) to the tree's owner only.
TOKEN = "owner-of-the-test"


def owner_get(url: str) -> tuple[int, str]:
    return get(url, {"Authorization": f"Bearer {TOKEN}"})


class NobodyWatch:
    """`adrap watch` as uid/gid 65534, its address read from the lock file."""

    def __init__(self, folder: Path, state: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
        env |= {"ADRAP_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1", "HOME": str(state.parent)}
        env |= {"ADRAP_WATCH__HTTP_TOKEN": TOKEN}
        env |= numba_cache_for(state.parent / "numba", NOBODY, NOBODY)  # not compiled again
        self.state = state
        self.log = state.parent / f"watch-{time.monotonic_ns()}.log"
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 sys.executable, "-m", "ingestor", "watch", str(folder), "--http-port", "0"],
                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=state.parent,
            )  # fmt: skip
        self.base = ""

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 240
        while not self.base:
            assert self.proc.poll() is None, self.logs()
            assert time.monotonic() < deadline, self.logs()
            try:
                info = json.loads((self.state / "adrap.lock").read_text() or "{}")
            except (OSError, ValueError):
                info = {}
            if "http" in info and info.get("pid") == self.proc.pid:
                self.base = f"http://{info['http']}"
            time.sleep(0.2)
        wait_for(lambda: get(self.base + "/readyz")[0] == 200, 240)

    def status(self) -> dict[str, object]:
        out: dict[str, object] = json.loads(owner_get(self.base + "/status")[1])
        return out

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(120) == 0, self.logs()


@pytest.fixture
def place() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="adrap-nobody-"))
    base.chmod(0o777)
    yield base
    for path in base.rglob("*"):  # give back what the test took away, then clean up
        if not path.is_symlink():
            path.chmod(0o777)
    shutil.rmtree(base, ignore_errors=True)


def unread(status: dict[str, object], kind: str) -> dict[str, str]:
    block = status["unread"]
    assert isinstance(block, dict)
    return {row["source"]: row["reason"] for row in block[f"{kind}_files"]}


def test_files_and_folders_the_daemon_cannot_read_are_kept_and_shown_stale(place: Path) -> None:
    share = place / "share"
    (share / "sub").mkdir(parents=True)
    rng = random.Random(0)
    for name in ["d0.txt", "d1.txt", "d2.txt", "sub/s0.txt", "sub/s1.txt"]:
        (share / name).write_text(text_of(rng, 6))
    state = place / "state"
    state.mkdir()
    for path in [share, share / "sub", *share.rglob("*.txt"), state]:
        path.chmod(0o777 if path.is_dir() else 0o644)

    first = NobodyWatch(share, state)
    first.wait_ready()
    assert first.status()["documents"] == 5
    # a document locked while the daemon runs: saved, then unreadable
    (share / "d0.txt").write_text(text_of(rng, 7))
    (share / "d0.txt").chmod(0)
    wait_for(lambda: "d0.txt" in unread(first.status(), "stale"), 60)
    assert first.status()["documents"] == 5
    first.stop()

    # while it is stopped, a file is edited and locked, and a folder becomes unreadable to it
    (share / "d1.txt").write_text(text_of(rng, 8))
    (share / "d1.txt").chmod(0)
    (share / "sub").chmod(0)
    second = NobodyWatch(share, state)
    second.wait_ready()  # the worker's start-up rescan must keep them
    wanted = {"d0.txt", "d1.txt", "sub/"}
    wait_for(lambda: wanted <= set(unread(second.status(), "stale")), 60)
    status = second.status()
    assert status["documents"] == 5, second.logs()
    stale = unread(status, "stale")
    assert "permission denied" in stale["d1.txt"]
    assert "cannot be listed" in stale["sub/"]
    hits = json.loads(owner_get(second.base + "/query?q=" + "harbour+lantern+falcon")[1])["hits"]
    assert hits, "the kept documents are still searchable"

    # access comes back: the retry (with backoff) reads them again
    for path in [share / "d0.txt", share / "d1.txt"]:
        path.chmod(0o644)
    (share / "sub").chmod(0o777)
    wait_for(lambda: not unread(second.status(), "stale"), 90)
    assert second.status()["documents"] == 5
    second.stop()
