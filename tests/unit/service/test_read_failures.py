"""Only a file that is gone is deleted: read and listing failures keep what was read, say why.

Each failure is injected as the OS error a real share gives (root reads any file here, so the
errors are raised from ``os.open`` / ``os.scandir`` for the chosen paths) through the real watcher
on a real qdrant-edge shard. ``tests/integration/test_unprivileged.py`` runs the daemon as an
unprivileged user on a folder with an unreadable file.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from watchdog.events import FileModifiedEvent

import ingestor.read.documents as documents
from ingestor.pipeline import Pipeline
from ingestor.pipeline.unread import Unread
from testkit.daemons import make_watcher
from tests.unit.service.test_watcher import assert_agrees, make_pipeline, write_corpus
from tests.unit.tree.test_adrap import doc_text


class Clock:
    """A settable clock for the ledger's retry times."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def share(tmp_path: Path) -> Iterator[tuple[Pipeline, Path, Clock]]:
    root = tmp_path / "share"
    write_corpus(root, 6)
    sub = root / "sub"
    sub.mkdir()
    for i in range(3):
        (sub / f"s{i}.txt").write_text(doc_text(random.Random(100 + i), 5))
    clock = Clock()
    p = make_pipeline(tmp_path, unread=Unread(tmp_path / "unread.json", clock=clock))
    p.build(root)
    yield p, root.resolve(), clock
    p.context.store.close()


def fail_open(monkeypatch: pytest.MonkeyPatch, failing: dict[str, int]) -> None:
    """Make ``os.open`` of the files named in ``failing`` raise that errno (EBUSY, EACCES, EIO)."""
    real = os.open

    def fake(path: str | os.PathLike[str], flags: int, *args: int, **kw: int) -> int:
        code = failing.get(Path(path).name)
        if code is not None:
            raise OSError(code, os.strerror(code), str(path))
        return real(path, flags, *args, **kw)

    monkeypatch.setattr(documents.os, "open", fake)


def fail_listing(monkeypatch: pytest.MonkeyPatch, folders: dict[str, int]) -> None:
    """Make ``os.scandir`` of the folders named in ``folders`` raise that errno."""
    real = os.scandir

    def fake(path: int | str | os.PathLike[str]) -> object:
        # the listing walks with descriptors: name the folder a descriptor is open on
        where = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else path
        code = folders.get(Path(where).name)
        if code is not None:
            raise OSError(code, os.strerror(code), str(path))
        return real(path)

    monkeypatch.setattr(documents.os, "scandir", fake)


def nodes_of(p: Pipeline, source: str) -> list[str]:
    entry = p.require_state().sources.get(source)
    assert entry is not None, f"{source} left the tree"
    return list(entry.node_ids)


@pytest.mark.parametrize("code", [errno.EBUSY, errno.EACCES, errno.EIO])
def test_a_file_that_cannot_be_read_now_keeps_its_leaves_and_is_retried_with_backoff(
    share: tuple[Pipeline, Path, Clock], monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    p, root, clock = share
    before = nodes_of(p, "d1.txt")
    w = make_watcher(p, p.require_state(), root, debounce=0.01)
    failing = {"d1.txt": code}
    fail_open(monkeypatch, failing)
    (root / "d1.txt").write_text(doc_text(random.Random(7), 5))  # saved while locked
    w.handler.dispatch(FileModifiedEvent(str(root / "d1.txt")))
    assert w.apply(w.next_batch())
    assert nodes_of(p, "d1.txt") == before  # nothing deleted, nothing re-embedded
    entry = p.collector.unread.get("d1.txt")
    assert entry is not None
    assert entry.kind == "stale"
    assert entry.kept
    assert os.strerror(code).lower() in entry.reason.lower()
    assert p.collector.unread.due() == []  # not before its backoff
    clock.now = entry.next_try
    assert p.collector.unread.due() == ["d1.txt"]
    assert w.apply(w.next_batch())  # the retry fails again: the wait doubles
    again = p.collector.unread.get("d1.txt")
    assert again is not None
    assert again.attempts == 2
    assert again.next_try - clock.now == pytest.approx(2 * (entry.next_try - entry.since))
    del failing["d1.txt"]  # the file is closed on the share
    clock.now = again.next_try
    assert w.apply(w.next_batch())
    assert "d1.txt" not in p.collector.unread
    assert nodes_of(p, "d1.txt") != before  # the saved version is in the tree now
    assert_agrees(p, root, w.state)


def test_a_folder_that_cannot_be_listed_keeps_every_document_under_it(
    share: tuple[Pipeline, Path, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, root, _ = share
    under = sorted(p.require_state().sources.keys_with_prefix("sub/"))
    assert len(under) == 3
    w = make_watcher(p, p.require_state(), root, debounce=0.01)
    fail_listing(monkeypatch, {"sub": errno.EIO})
    w.enqueue([root])  # a full rescan
    assert w.apply(w.next_batch())
    assert sorted(p.require_state().sources.keys_with_prefix("sub/")) == under
    folder = p.collector.unread.get("sub/")
    assert folder is not None
    assert folder.kind == "stale"
    assert folder.kept
    assert "cannot be listed" in folder.reason
    monkeypatch.undo()  # listed again: a file removed meanwhile goes, the rest stays
    (root / "sub" / "s0.txt").unlink()
    w.enqueue([root])
    assert w.apply(w.next_batch())
    assert sorted(p.require_state().sources.keys_with_prefix("sub/")) == under[1:]
    assert "sub/" not in p.collector.unread
    assert_agrees(p, root, w.state)


def test_a_file_vanishing_mid_read_is_kept_until_a_listing_shows_it_gone(
    share: tuple[Pipeline, Path, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, root, clock = share
    before = nodes_of(p, "d2.txt")
    w = make_watcher(p, p.require_state(), root, debounce=0.01)
    fail_open(monkeypatch, {"d2.txt": errno.ENOENT})  # listed, then gone when opened
    (root / "d2.txt").write_text(doc_text(random.Random(8), 5))
    w.handler.dispatch(FileModifiedEvent(str(root / "d2.txt")))
    assert w.apply(w.next_batch())
    assert nodes_of(p, "d2.txt") == before
    monkeypatch.undo()
    (root / "d2.txt").unlink()  # now it is really gone: the retry removes it
    entry = p.collector.unread.get("d2.txt")
    assert entry is not None
    clock.now = entry.next_try
    assert w.apply(w.next_batch())
    assert "d2.txt" not in p.require_state().sources
    assert "d2.txt" not in p.collector.unread
    assert_agrees(p, root, w.state)


def test_a_file_deleted_while_its_folder_lists_is_removed(
    share: tuple[Pipeline, Path, Clock],
) -> None:
    p, root, _ = share
    w = make_watcher(p, p.require_state(), root, debounce=0.01)
    (root / "sub" / "s1.txt").unlink()
    w.handler.dispatch(FileModifiedEvent(str(root / "sub" / "s1.txt")))
    assert w.apply(w.next_batch())
    assert "sub/s1.txt" not in p.require_state().sources


def test_a_file_whose_folder_cannot_be_listed_is_not_taken_for_gone(
    share: tuple[Pipeline, Path, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event for a path that stat cannot see, under a folder that cannot be listed."""
    p, root, _ = share
    w = make_watcher(p, p.require_state(), root, debounce=0.01)
    real_listdir = os.listdir

    def listdir(path: str | os.PathLike[str]) -> list[str]:
        if Path(path).name == "sub":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(documents.os, "listdir", listdir)
    ghost = root / "sub" / "s1.txt"
    os.rename(ghost, root / "moved-away.tmp")  # stat fails, and the folder cannot prove it
    w.handler.dispatch(FileModifiedEvent(str(ghost)))
    assert w.apply(w.next_batch())
    assert "sub/s1.txt" in p.require_state().sources


def test_a_skip_is_logged_once_per_file_version_not_on_every_rescan(
    share: tuple[Pipeline, Path, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    p, root, _ = share
    w = make_watcher(p, p.require_state(), root, debounce=0.01)
    (root / "blob.txt").write_bytes(b"\x00\x01" * 100)
    for _ in range(3):
        w.enqueue([root])
        with caplog.at_level("WARNING"):
            assert w.apply(w.next_batch())
    assert sum("blob.txt" in r.getMessage() for r in caplog.records) == 1
    assert p.collector.unread.counts() == {"skipped": 1, "stale": 0}
    (root / "blob.txt").write_bytes(b"\x00\x02" * 120)  # a new version is read and logged
    w.enqueue([root])
    with caplog.at_level("WARNING"):
        assert w.apply(w.next_batch())
    assert sum("blob.txt" in r.getMessage() for r in caplog.records) == 2
    (root / "blob.txt").unlink()
    w.enqueue([root])
    assert w.apply(w.next_batch())
    assert len(p.collector.unread) == 0


def test_a_failing_rescan_never_quarantines_the_folder_but_isolates_the_file(
    share: tuple[Pipeline, Path, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, root, _ = share
    w = make_watcher(p, p.require_state(), root, debounce=0.01)
    (root / "new.txt").write_text(doc_text(random.Random(9), 5))
    (root / "poison.txt").write_text(doc_text(random.Random(10), 5))
    real = p.apply_batch

    def apply_batch(state, docs, gone, report):  # type: ignore[no-untyped-def]
        if any(d.source == "poison.txt" for d in docs):
            raise RuntimeError("a parser bug on poison.txt")
        return real(state, docs, gone, report)

    monkeypatch.setattr(p, "apply_batch", apply_batch)
    w.enqueue([root])
    assert not w.apply(w.next_batch())  # the rescan of the root fails
    while w.redo.parts:
        w.apply(w.next_batch())
    assert set(w.quarantine.items()) == {"poison.txt"}
    sources = p.require_state().sources
    assert "new.txt" in sources
    assert "poison.txt" not in sources
    # a later rescan is not dropped: the root is not quarantined
    (root / "later.txt").write_text(doc_text(random.Random(11), 5))
    w.enqueue([root])
    assert w.apply(w.next_batch())
    assert "later.txt" in p.require_state().sources


def test_a_batch_of_removals_from_one_folder_lists_it_once(
    share: tuple[Pipeline, Path, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, root, _ = share
    real_listdir = os.listdir
    listings: list[Path] = []

    def listdir(path: str | os.PathLike[str]) -> list[str]:
        listings.append(Path(path))
        return real_listdir(path)

    removed = [root / f"d{i}.txt" for i in range(4)] + [root / "sub" / "s0.txt"]
    for path in removed:
        path.unlink()
    monkeypatch.setattr(documents.os, "listdir", listdir)
    report = p.update([*removed, root / "d5.txt"])  # d5 is still there: read, not removed
    sources = p.require_state().sources
    assert not any(path.relative_to(root).as_posix() in sources for path in removed)
    assert {"d4.txt", "d5.txt", "sub/s1.txt", "sub/s2.txt"} <= set(sources)
    assert sorted(listings) == [root, root / "sub"]  # a listing a folder, not one a file
    assert report.files_removed == 5
