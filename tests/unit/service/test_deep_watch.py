"""The observers survive a chain of folders deeper than Python's stack: watchdog's own walked every
new folder recursively, so a ``mkdir -p`` 1,000 deep killed the native observer's reading thread
(the daemon saw no change of the share from then on, and a restart died again walking the chain)
and the polling observer's thread. Here each still reports the next file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from watchdog.events import FileSystemEvent, FileSystemEventHandler

from ingestor.read.listing import MAX_DEPTH
from ingestor.service.events import make_observer
from ingestor.service.observers import depth_below, walk_down
from tests.conftest import wait_until
from tests.unit.read.test_deep_folders import _unchain, chain  # noqa: F401 (a fixture)

DEEP = 1000


class Seen(FileSystemEventHandler):
    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.lock = threading.Lock()

    def on_any_event(self, event: FileSystemEvent) -> None:
        with self.lock:
            self.paths.add(os.fsdecode(event.src_path))


@pytest.mark.parametrize("polling", [False, True], ids=["native", "polling"])
@pytest.mark.parametrize("when", ["before", "while"])
def test_the_observer_reports_the_next_file_after_a_chain_deeper_than_the_stack(
    tmp_path: Path, polling: bool, when: str
) -> None:
    root = (tmp_path / "share").resolve()
    root.mkdir()
    if when == "before":  # there when the daemon starts
        chain(root, DEEP)
    seen = Seen()
    observer = make_observer(polling=polling, interval=0.1, root=root)
    observer.schedule(seen, str(root), recursive=True)
    observer.start()
    try:
        if when == "while":  # made while it watches
            chain(root, DEEP)
        after = root / "after.txt"
        after.write_text("the next file\n")
        wait_until(lambda: str(after) in seen.paths, timeout=30, what="the next file's event")
        assert observer.is_alive()
        assert all(t.is_alive() for t in threading.enumerate() if "Inotify" in type(t).__name__)
    finally:
        observer.stop()
        observer.join(10)


def test_the_walk_lists_folders_to_the_depth_the_listing_lists(tmp_path: Path) -> None:
    root = tmp_path / "share"
    root.mkdir()
    chain(root, MAX_DEPTH + 5, at=(1, MAX_DEPTH + 5))
    walked = list(walk_down(os.fsencode(root), os.fsencode(root)))
    assert len(walked) == MAX_DEPTH + 1  # the root and MAX_DEPTH folders below it
    assert max(depth_below(f, os.fsencode(root)) for f, _, _ in walked) == MAX_DEPTH
    assert walked[1][2] == [b"1.md"]
