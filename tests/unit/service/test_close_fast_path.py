"""The closed-after-write fast path: a burst whose files were all closed after writing (or moved
into place) ends after the close grace instead of the debounce; anything else keeps the debounce.
And the update worker yields the CPU to queries (its nice value).

Timing tests use a long debounce (5 s) against a short grace (0.2 s), so that a busy machine
cannot blur which of the two ended a burst.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import threading
import time
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
from ingestor.service.watcher import Watcher, make_observer
from ingestor.tree.state import TreeState
from tests.unit.service.test_watcher import make_pipeline
from tests.unit.tree.test_adrap import doc_text

DEBOUNCE = 5.0
GRACE = 0.2


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    """A pipeline over an empty store: these tests only form batches, they never apply one."""
    p = make_pipeline(tmp_path)
    yield p
    p.store.close()


def watcher(p: Pipeline, root: Path, **kwargs: Any) -> Watcher:
    root.mkdir(parents=True, exist_ok=True)
    state = TreeState(tree="t", root=str(root), embed_model="x", dim=1)
    return Watcher(p, state, root, **{"debounce": DEBOUNCE, "close_grace": GRACE, **kwargs})


def timed_batch(w: Watcher) -> tuple[set[Path], float]:
    t0 = time.monotonic()
    batch = w.next_batch()
    return batch, time.monotonic() - t0


def batch_within(w: Watcher, seconds: float) -> set[Path] | None:
    """Return the next batch if one forms within ``seconds``, else None (the watcher is stopped)."""
    out: list[set[Path]] = []
    t = threading.Thread(target=lambda: out.append(w.next_batch()))
    t.start()
    t.join(seconds)
    if t.is_alive():
        w.stop()  # no worker thread: only wakes next_batch, which returns what it holds
        t.join()
        return None
    return out[0]


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
    batch, took = timed_batch(w)
    assert root / "saved.txt" in batch
    assert took < 2.0, f"took {took:.2f} s: waited for the {DEBOUNCE} s debounce"


def test_a_file_still_open_for_writing_waits_for_the_debounce(
    observed: tuple[Watcher, Path],
) -> None:
    w, root = observed
    with (root / "growing.txt").open("w") as f:
        f.write("first part of a long copy. ")
        f.flush()
        assert batch_within(w, 2.0) is None, "a file still being written was batched early"


def test_a_rapid_stream_of_closed_files_is_coalesced_into_few_batches(
    observed: tuple[Watcher, Path], tmp_path: Path
) -> None:
    w, root = observed
    source = tmp_path / "tocopy"
    source.mkdir()
    rng = random.Random(2)
    for i in range(150):
        (source / f"c{i}.txt").write_text(doc_text(rng, 2))
    shutil.copytree(source, root / "copied")  # like cp -r: create, write, close, next file
    got: set[Path] = set()
    batches = 0
    while len({p for p in got if p.suffix == ".txt"}) < 150:
        batch = batch_within(w, 10.0)
        assert batch is not None, f"only {len(got)} paths came in {batches} batches"
        got |= batch
        batches += 1
        assert batches <= 3, f"the copy was split into {batches}+ batches"


def test_reading_a_file_never_starts_a_batch(observed: tuple[Watcher, Path]) -> None:
    w, root = observed
    f = root / "read.txt"
    f.write_text("a note")
    assert w.next_batch() == {f}
    assert f.read_text() == "a note"  # open, read, close without writing
    with f.open("a"):  # opened for writing, closed unchanged: a close mark alone
        pass
    assert batch_within(w, 1.5) is None


# -- the rules, event by event -------------------------------------------------------------------


def test_a_write_reopened_within_the_grace_joins_the_same_burst(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    root = tmp_path / "docs"
    w = watcher(pipeline, root)
    f, g = root / "a.txt", root / "b.txt"
    w.handler.dispatch(FileModifiedEvent(str(f)))
    w.handler.dispatch(FileClosedEvent(str(f)))
    time.sleep(GRACE / 4)
    w.handler.dispatch(FileCreatedEvent(str(g)))  # the next file of a copy, still open
    t = threading.Timer(1.0, lambda: w.handler.dispatch(FileClosedEvent(str(g))))
    t.start()
    batch, took = timed_batch(w)
    t.join()
    assert batch == {f, g}
    assert 1.0 <= took < 2.5  # waited for g's close, then the grace only


def test_deletions_and_moved_away_files_keep_the_debounce(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """An editor may delete (or move away) a file and create it again: wait the debounce."""
    root = tmp_path / "docs"
    w = watcher(pipeline, root, debounce=1.0)
    w.handler.dispatch(FileDeletedEvent(str(root / "gone.txt")))
    w.handler.dispatch(FileMovedEvent(str(root / "a.txt"), str(root / "b.txt")))
    batch, took = timed_batch(w)
    assert batch == {root / "gone.txt", root / "a.txt", root / "b.txt"}
    assert took >= 0.9


def test_a_save_by_rename_over_ends_after_the_grace(pipeline: Pipeline, tmp_path: Path) -> None:
    """Write a hidden temp file, close it, rename it over the document (editors, rsync)."""
    root = tmp_path / "docs"
    w = watcher(pipeline, root)
    tmp, doc = root / ".doc.txt.tmp", root / "doc.txt"
    w.handler.dispatch(FileCreatedEvent(str(tmp)))
    w.handler.dispatch(FileModifiedEvent(str(tmp)))
    w.handler.dispatch(FileClosedEvent(str(tmp)))
    w.handler.dispatch(FileMovedEvent(str(tmp), str(doc)))
    batch, took = timed_batch(w)
    assert doc in batch
    assert took < 2.0


def test_polling_mode_keeps_the_debounce_even_after_a_close(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    root = tmp_path / "docs"
    w = watcher(pipeline, root, debounce=1.0, settle=0.3)
    w.handler.dispatch(FileCreatedEvent(str(root / "n.txt")))
    w.handler.dispatch(FileClosedEvent(str(root / "n.txt")))
    _, took = timed_batch(w)
    assert took >= 0.9


# -- readers first -------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux only")
def test_the_update_worker_runs_at_a_lower_priority_than_query_threads(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """Queries keep their CPU during an update: the worker thread's nice value is raised."""
    w = watcher(pipeline, tmp_path / "docs", nice=5)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    w.start()
    try:
        assert w._thread is not None
        tid = w._thread.native_id
        assert tid is not None
        wait_until = time.monotonic() + 5
        while os.getpriority(os.PRIO_PROCESS, tid) == mine and time.monotonic() < wait_until:
            time.sleep(0.01)
        assert os.getpriority(os.PRIO_PROCESS, tid) == min(19, mine + 5)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # only it
    finally:
        w.stop(timeout=10)
