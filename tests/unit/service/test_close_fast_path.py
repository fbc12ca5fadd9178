"""The closed-after-write fast path: a burst whose files were all closed after writing (or moved
into place) ends after the close grace instead of the debounce; anything else keeps the debounce.
And the update worker yields the CPU to queries (its nice value).

The watcher runs on a :class:`~testkit.fakes.FakeClock`: which quiet period ended a burst is read
from the waits it asked for, never from the wall clock, so a busy machine cannot blur it. With the
real observer, the test first waits (with a deadline) until inotify's events are queued.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
)

from ingestor.pipeline import Pipeline
from ingestor.service.events import Change
from ingestor.service.watcher import Watcher, make_observer
from ingestor.tree.state import TreeState
from testkit.daemons import make_watcher
from testkit.fakes import FakeClock
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline
from tests.unit.tree.test_adrap import doc_text

DEBOUNCE = 5.0
GRACE = 0.2


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    """A pipeline over an empty store: these tests only form batches, they never apply one."""
    p = make_pipeline(tmp_path)
    yield p
    p.context.store.close()


def watcher(p: Pipeline, root: Path, **kwargs: Any) -> Watcher:
    root.mkdir(parents=True, exist_ok=True)
    state = TreeState(tree="t", root=str(root), embed_model="x", dim=1)
    options = {"debounce": DEBOUNCE, "close_grace": GRACE, "clock": FakeClock(), **kwargs}
    return make_watcher(p, state, root, **options)


def quiet_waited(w: Watcher) -> float:
    """Return the quiet period that ended the last burst: the timeout of the wait that expired."""
    assert isinstance(w.clock, FakeClock)
    return w.clock.waits[-1]


def queued(w: Watcher) -> list[Change]:
    """Return the changes on the watcher's queue now (the observer thread may be adding more)."""
    with w.paths.mutex:
        return [c for c in w.paths.queue if c is not None]


def closed(w: Watcher, path: Path) -> bool:
    """True once the observer has queued the close-after-write mark of ``path``."""
    return any(c.path == path and c.complete and not c.changed for c in queued(w))


@pytest.fixture
def observed(pipeline: Pipeline, tmp_path: Path) -> Iterator[tuple[Watcher, Path]]:
    """A watcher fed by watchdog's native (inotify) observer on ``tmp_path/docs``."""
    root = tmp_path / "docs"
    w = watcher(pipeline, root)
    observer = make_observer()
    observer.schedule(w.handler, str(root), recursive=True)
    observer.start()
    try:
        yield w, root
    finally:
        observer.stop()
        observer.join()


# -- with the real observer ----------------------------------------------------------------------


def test_a_file_closed_after_writing_is_batched_well_before_the_debounce(
    observed: tuple[Watcher, Path],
) -> None:
    w, root = observed
    (root / "saved.txt").write_text(doc_text(random.Random(1), 5))  # open, write, close
    wait_until(lambda: closed(w, root / "saved.txt"), what="inotify's close of saved.txt")
    batch = w.next_batch()
    assert root / "saved.txt" in batch
    assert quiet_waited(w) == GRACE, f"waited {quiet_waited(w)} s, not the {GRACE} s grace"


def test_a_file_still_open_for_writing_waits_for_the_debounce(
    observed: tuple[Watcher, Path],
) -> None:
    w, root = observed
    growing = root / "growing.txt"
    with growing.open("w") as f:
        f.write("first part of a long copy. ")
        f.flush()
        wait_until(
            lambda: any(c.path == growing and c.changed for c in queued(w)),
            what="inotify's write of growing.txt",
        )
        assert w.next_batch() == {growing}
        assert quiet_waited(w) == DEBOUNCE, "a file still being written was batched early"


def test_a_rapid_stream_of_closed_files_is_coalesced_into_few_batches(
    observed: tuple[Watcher, Path], tmp_path: Path
) -> None:
    w, root = observed
    source = tmp_path / "tocopy"
    source.mkdir()
    rng = random.Random(2)
    for i in range(150):
        (source / f"c{i}.txt").write_text(doc_text(rng, 2))
    # inotify watches a new folder only once watchdog has seen it appear; files written into it
    # before then are reported as created (a snapshot), not closed. A user's cp -r into a watched
    # folder gets the debounce for those: this test is about the closes, so the folder exists first.
    (root / "copied").mkdir()
    probe = root / "copied" / "probe.txt"

    def watched() -> bool:  # rewrite the probe until inotify reports its close
        probe.write_text("the folder is watched")
        return closed(w, probe)

    wait_until(watched, what="inotify's close of copied/probe.txt")
    shutil.copytree(source, root / "copied", dirs_exist_ok=True)  # create, write, close, next
    copied = {root / "copied" / f"c{i}.txt" for i in range(150)}
    wait_until(
        lambda: copied <= {c.path for c in queued(w) if c.complete and not c.changed},
        timeout=60,
        what="inotify's closes of the 150 copied files",
    )
    batch = w.next_batch()
    assert copied <= batch, f"{len(copied - batch)} copied files missing from the batch"
    assert quiet_waited(w) == GRACE, "every copied file was closed: the grace ends the burst"


def test_reading_a_file_never_starts_a_batch(observed: tuple[Watcher, Path]) -> None:
    w, root = observed
    f = root / "read.txt"
    f.write_text("a note")
    wait_until(lambda: closed(w, f), what="inotify's close of read.txt")
    assert w.next_batch() == {f}
    assert f.read_text() == "a note"  # open, read, close without writing
    with f.open("a"):  # opened for writing, closed unchanged: a close mark alone
        pass
    marker = root / "marker.txt"  # the next change: inotify reports it after the read
    marker.write_text("written after the read")
    wait_until(lambda: closed(w, marker), what="inotify's close of marker.txt")
    assert w.next_batch() == {marker}, "the read (or the unchanged close) started a batch"


# -- the rules, event by event -------------------------------------------------------------------


def test_a_write_reopened_within_the_grace_joins_the_same_burst(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    root = tmp_path / "docs"
    w = watcher(pipeline, root)
    clock = w.clock
    assert isinstance(clock, FakeClock)
    f, g = root / "a.txt", root / "b.txt"
    w.handler.dispatch(FileModifiedEvent(str(f)))
    w.handler.dispatch(FileClosedEvent(str(f)))
    # the next file of a copy, created within the grace and still open for a second
    clock.after(GRACE / 4, lambda: w.handler.dispatch(FileCreatedEvent(str(g))))
    clock.after(1.0, lambda: w.handler.dispatch(FileClosedEvent(str(g))))
    batch = w.next_batch()
    assert batch == {f, g}
    assert clock.now == pytest.approx(1.0 + GRACE)  # waited for g's close, then the grace only


def test_deletions_and_moved_away_files_keep_the_debounce(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """An editor may delete (or move away) a file and create it again: wait the debounce."""
    root = tmp_path / "docs"
    w = watcher(pipeline, root, debounce=1.0)
    w.handler.dispatch(FileDeletedEvent(str(root / "gone.txt")))
    w.handler.dispatch(FileMovedEvent(str(root / "a.txt"), str(root / "b.txt")))
    batch = w.next_batch()
    assert batch == {root / "gone.txt", root / "a.txt", root / "b.txt"}
    assert quiet_waited(w) == 1.0


def test_a_save_by_rename_over_ends_after_the_grace(pipeline: Pipeline, tmp_path: Path) -> None:
    """Write a hidden temp file, close it, rename it over the document (editors, rsync)."""
    root = tmp_path / "docs"
    w = watcher(pipeline, root)
    tmp, doc = root / ".doc.txt.tmp", root / "doc.txt"
    w.handler.dispatch(FileCreatedEvent(str(tmp)))
    w.handler.dispatch(FileModifiedEvent(str(tmp)))
    w.handler.dispatch(FileClosedEvent(str(tmp)))
    w.handler.dispatch(FileMovedEvent(str(tmp), str(doc)))
    batch = w.next_batch()
    assert doc in batch
    assert quiet_waited(w) == GRACE


def test_polling_mode_keeps_the_debounce_even_after_a_close(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    root = tmp_path / "docs"
    w = watcher(pipeline, root, debounce=1.0, settle=0.3)
    w.handler.dispatch(FileCreatedEvent(str(root / "n.txt")))
    w.handler.dispatch(FileClosedEvent(str(root / "n.txt")))
    w.next_batch()
    assert quiet_waited(w) == 1.0


# -- readers first -------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux only")
def test_the_update_worker_runs_at_a_lower_priority_than_query_threads(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """Queries keep their CPU during an update: the worker thread's nice value is raised."""
    w = watcher(pipeline, tmp_path / "docs", nice=5, clock=None)  # a real worker thread
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    w.start()
    try:
        assert w._thread is not None
        tid = w._thread.native_id
        assert tid is not None
        wait_until(lambda: os.getpriority(os.PRIO_PROCESS, tid) != mine, timeout=10)
        assert os.getpriority(os.PRIO_PROCESS, tid) == min(19, mine + 5)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # only it
    finally:
        w.stop(timeout=10)
