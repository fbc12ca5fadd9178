"""A folder the daemon cannot list or traverse is isolated at once: its documents are kept and
listed stale with the reason, every other change of the same batch lands on its first try, and
nothing is logged as an error (an expected condition, no traceback).

Root ignores mode bits, so the real case runs as an unprivileged user (uid/gid 65534, through
setpriv as ``tests/integration/test_unprivileged.py`` does) that owns the share and takes its own
access away; beside it, the same batch with EACCES injected where the kernel gives it, for a run
without root.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from watchdog.events import FileCreatedEvent, FileDeletedEvent, FileModifiedEvent

from ingestor.pipeline import Pipeline
from ingestor.pipeline.unread import Unread
from testkit.daemons import make_watcher
from testkit.numba_cache import numba_cache_for
from tests.unit.service.test_watcher import make_pipeline, write_corpus
from tests.unit.tree.test_adrap import doc_text

NOBODY = 65534
REPO = Path(__file__).resolve().parents[3]

# Run as the unprivileged user, owner of the share built by the test: make "sub" untraversable,
# then one batch holding an edit under it, a deletion event under it (what a poll that cannot
# list it reports) and a new file elsewhere; then a rescan of the root. Prints it as JSON.
SCRIPT = r"""
import json, logging, random, sys
from pathlib import Path
from watchdog.events import FileCreatedEvent, FileDeletedEvent, FileModifiedEvent
from ingestor.pipeline.unread import Unread
from tests.unit.service.test_unlistable_folder import batch_outcome
from tests.unit.service.test_watcher import make_pipeline

class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.rows = []

    def emit(self, record):
        self.rows.append([record.levelname, record.getMessage(), record.exc_info is not None])

records = Records()
logging.getLogger().addHandler(records)
logging.getLogger().setLevel(logging.INFO)
base = Path(sys.argv[1])
p = make_pipeline(base, unread=Unread(base / "unread.json"))
root = (base / "share").resolve()
try:
    (root / "sub").chmod(0)
    out = batch_outcome(p, root)
finally:
    (root / "sub").chmod(0o755)
    p.context.store.close()
out["records"] = records.rows
print("RESULT " + json.dumps(out))
"""


def make_share(base: Path) -> tuple[Pipeline, Path]:
    """A built tree over ``base/share``: d0-d3.txt and sub/s0-s1.txt."""
    root = base / "share"
    write_corpus(root, 4)
    (root / "sub").mkdir()
    for i in range(2):
        (root / "sub" / f"s{i}.txt").write_text(doc_text(random.Random(50 + i), 5))
    p = make_pipeline(base, unread=Unread(base / "unread.json"))
    p.build(root)
    return p, root.resolve()


def batch_outcome(p: Pipeline, root: Path) -> dict[str, Any]:
    """Apply one batch (events under ``sub`` and a new file elsewhere), then a rescan of the root;
    return what each did (``sub`` is already unreadable to this process)."""
    w = make_watcher(p, p.require_state(), root, debounce=0.01)
    (root / "new.txt").write_text(doc_text(random.Random(71), 5))
    w.handler.dispatch(FileModifiedEvent(str(root / "sub" / "s0.txt")))
    w.handler.dispatch(FileDeletedEvent(str(root / "sub" / "s1.txt")))
    w.handler.dispatch(FileCreatedEvent(str(root / "new.txt")))
    first = w.apply(w.next_batch())
    after_batch = sorted(p.require_state().sources)
    failures, waiting = w.failures, len(w.redo)
    w.enqueue([root])
    rescan = w.apply(w.next_batch())
    return {
        "first": first,
        "failures": failures,
        "waiting": waiting,
        "after_batch": after_batch,
        "rescan": rescan,
        "after_rescan": sorted(p.require_state().sources),
        "stale": {
            s: [e.reason, e.kept]
            for s, e in p.collector.unread.items().items()
            if e.kind == "stale"
        },
    }


def check(out: dict[str, Any]) -> None:
    every = ["d0.txt", "d1.txt", "d2.txt", "d3.txt", "new.txt", "sub/s0.txt", "sub/s1.txt"]
    assert out["first"], "the batch with the new file did not land on its first try"
    assert (out["failures"], out["waiting"]) == (0, 0), "a failure, or paths waiting to retry"
    assert out["after_batch"] == every  # new.txt landed; nothing under sub/ deleted
    assert out["rescan"]
    assert out["after_rescan"] == every
    stale = out["stale"]
    assert "sub/" in stale, stale
    assert "cannot be listed" in stale["sub/"][0]
    assert stale["sub/"][1], "the folder's documents are kept"
    errors = [r for r in out.get("records", []) if r[0] in ("ERROR", "CRITICAL") or r[2]]
    assert errors == [], errors


@pytest.fixture
def place() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="adrap-unlistable-"))
    base.chmod(0o777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.integration  # a child process as another user (its numba cache: a copy, testkit)
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run the reader as an unprivileged user",
)
def test_an_untraversable_folder_is_isolated_at_once_for_an_unprivileged_reader(
    place: Path,
) -> None:
    p, _ = make_share(place)  # built here: the child only updates (no clustering to compile)
    p.context.store.close()
    for path in [place, *place.rglob("*")]:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
    env |= {"HOME": str(place), "PYTHONPATH": str(REPO)}
    env |= numba_cache_for(place / "numba", NOBODY, NOBODY)  # else it compiles UMAP: 40-90 s
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         sys.executable, "-c", SCRIPT, str(place)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    check(json.loads(line.removeprefix("RESULT ")))


def test_eacces_under_a_folder_leaves_the_rest_of_the_batch_to_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The same batch as root, with EACCES where the kernel gives it to a user without ``x`` on
    ``sub``: at every name looked up under it, and at its listing."""
    p, root = make_share(tmp_path)
    sub = str(root / "sub")
    under = sub + os.sep
    real_stat, real_lstat, real_scandir, real_open = os.stat, os.lstat, os.scandir, os.open

    def denied(path: Any) -> None:
        text = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else ""
        if text.startswith(under):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), text)

    def fake_stat(path: Any, *args: Any, dir_fd: int | None = None, **kw: Any) -> Any:
        if dir_fd is not None and os.readlink(f"/proc/self/fd/{dir_fd}") == sub:
            denied(under + os.fsdecode(path))
        denied(path)
        return real_stat(path, *args, dir_fd=dir_fd, **kw)

    def fake_lstat(path: Any, *args: Any, **kw: Any) -> Any:
        denied(path)
        return real_lstat(path, *args, **kw)

    def fake_scandir(path: Any = ".") -> Any:
        where = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else path
        if os.fspath(where) == sub:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), sub)
        denied(where)
        return real_scandir(path)

    def fake_open(path: Any, flags: int, *args: Any, dir_fd: int | None = None, **kw: Any) -> int:
        if dir_fd is not None and os.readlink(f"/proc/self/fd/{dir_fd}") == sub:
            denied(under + os.fsdecode(path))
        denied(path)
        return real_open(path, flags, *args, dir_fd=dir_fd, **kw)

    monkeypatch.setattr(os, "stat", fake_stat)
    monkeypatch.setattr(os, "lstat", fake_lstat)
    monkeypatch.setattr(os, "scandir", fake_scandir)
    monkeypatch.setattr(os, "open", fake_open)
    try:
        with caplog.at_level("INFO"):
            out = batch_outcome(p, root)
    finally:
        monkeypatch.undo()
        p.context.store.close()
    out["records"] = [[r.levelname, r.getMessage(), r.exc_info is not None] for r in caplog.records]
    check(out)
