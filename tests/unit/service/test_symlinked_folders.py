"""Symlinked folders in a watched share: the daemon lists by the build's rules, through real
observers on a real folder. A link to a parent folder is a loop, a link to another folder of the
share a second name for it: neither is entered, so the tree holds each file once, under its own
name, and the links are listed as skipped with the reason."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from watchdog.events import FileCreatedEvent, FileModifiedEvent

from ingestor.pipeline import Pipeline, UpdateReport
from ingestor.read.documents import iter_documents
from ingestor.service.events import make_observer
from testkit.daemons import make_watcher
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline, write_corpus
from tests.unit.tree.test_adrap import doc_text

REAL = {*(f"d{i}.txt" for i in range(4)), "sub/s0.txt", "sub/s1.txt"}


@pytest.fixture
def share(tmp_path: Path) -> Iterator[tuple[Pipeline, Path]]:
    root = tmp_path / "share"
    write_corpus(root, 4)
    (root / "sub").mkdir()
    for i in range(2):
        (root / "sub" / f"s{i}.txt").write_text(doc_text(random.Random(50 + i), 5))
    p = make_pipeline(tmp_path)
    p.build(root)
    yield p, root.resolve()
    p.context.store.close()


def skipped(p: Pipeline) -> dict[str, str]:
    return {s: e.reason for s, e in p.collector.unread.items().items() if e.kind == "skipped"}


@pytest.mark.parametrize("polling", [False, True], ids=["native", "polling"])
def test_links_to_a_parent_and_to_a_sibling_folder_index_no_file_twice(
    share: tuple[Pipeline, Path], polling: bool
) -> None:
    p, root = share
    assert set(p.require_state().sources) == REAL
    w = make_watcher(p, p.require_state(), root, debounce=0.1)
    observer = make_observer(polling=polling, interval=0.1)
    observer.schedule(w.handler, str(root), recursive=True)
    observer.start()
    w.start()
    try:
        (root / "sub" / "up").symlink_to(root, target_is_directory=True)  # a loop
        (root / "sub" / "back").symlink_to("..", target_is_directory=True)  # a loop, relative
        (root / "alias").symlink_to(root / "sub", target_is_directory=True)  # a second name
        (root / "late.txt").write_text(doc_text(random.Random(60), 5))
        # the links' events came first: applied once late.txt, the last change, is
        wait_until(
            lambda: "late.txt" in p.require_state().sources and not w.pending(),
            timeout=60,
            what="late.txt indexed",
        )
        # a rescan of the root, of the link itself, and an event through the link
        batches = w.batches
        w.enqueue([root, root / "sub" / "up", root / "alias"])
        w.handler.dispatch(FileModifiedEvent(str(root / "sub" / "up" / "d0.txt")))
        w.handler.dispatch(FileCreatedEvent(str(root / "alias" / "s0.txt")))
        wait_until(lambda: w.batches > batches and not w.pending(), what="the rescan")
    finally:
        observer.stop()
        observer.join(timeout=30)  # a snapshot walking a loop would never end
        w.stop(timeout=30)
    assert not observer.is_alive(), "the observer is still walking"
    assert set(p.require_state().sources) == REAL | {"late.txt"}
    reasons = skipped(p)
    assert "loop" in reasons["sub/up"]
    assert "loop" in reasons["sub/back"]
    assert "indexed under its own name" in reasons["alias"]
    assert set(p.context.store.iter_ids("t")) == set(p.require_state().nodes)


def test_a_rescan_of_any_folder_lists_what_the_build_lists_there(tmp_path: Path) -> None:
    root = tmp_path / "share"
    write_corpus(root / "a" / "b", 2)
    write_corpus(root / "c", 2)
    (root / "a" / "b" / "top").symlink_to(root, target_is_directory=True)
    (root / "a" / "to_c").symlink_to(root / "c", target_is_directory=True)
    (root / "c" / "up").symlink_to("..", target_is_directory=True)
    built = {
        path.relative_to(root).as_posix(): isinstance(item, Exception)
        for path, item in iter_documents(root, max_bytes=10**6)
    }
    assert {k for k, refused in built.items() if not refused} == {
        "a/b/d0.txt",
        "a/b/d1.txt",
        "c/d0.txt",
        "c/d1.txt",
    }
    p = make_pipeline(tmp_path)
    try:
        p.build(root)
        state = p.require_state()
        assert set(state.sources) == {k for k, refused in built.items() if not refused}
        for folder in ["a", "a/b", "c", "a/b/top", "a/to_c", "c/up", "a/b/top/a/b"]:
            docs, gone = p.collect(state, [root / folder], UpdateReport())
            assert {d.source for d in docs} <= set(state.sources), folder  # no second name
            assert gone == [], folder
    finally:
        p.context.store.close()
