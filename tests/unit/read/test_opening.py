"""A file is opened as it was resolved: a folder swapped for a link mid-read never leads outside.

The race is real: a thread swaps a folder of the share and a symlink to a folder outside it with
``renameat2(RENAME_EXCHANGE)`` (atomic, so the path always exists) as fast as it can, while the
reader reads a file under that folder again and again.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ingestor.errors import SourceError, SourceUnavailableError
from ingestor.pipeline.collect import Collector
from ingestor.pipeline.reports import BuildReport
from ingestor.read.documents import Document, read_document
from ingestor.read.listing import iter_files
from ingestor.read.opening import open_inside
from testkit import race
from testkit.race import SECRET

MAX = 1_000_000


class Swapper(race.Swapper):
    """The race's swapper; a system that cannot run the race skips the test."""

    def __init__(self, a: Path, b: Path) -> None:
        try:
            super().__init__(a, b)
        except race.RaceUnsupported as exc:
            pytest.skip(str(exc))


@pytest.fixture
def racy_share(tmp_path: Path) -> Path:
    """``share/d/app.txt`` inside; ``share/x`` a link to ``outside/``, whose ``app.txt`` is secret."""
    return race.racy_share(tmp_path)


def test_a_folder_swapped_for_an_outward_link_mid_read_never_yields_outside_bytes(
    racy_share: Path,
) -> None:
    reads = 4000
    outside = inside = refused = 0
    with Swapper(racy_share / "d", racy_share / "x") as swapper:
        for _ in range(reads):
            try:
                doc = read_document(racy_share / "d" / "app.txt", racy_share, max_bytes=MAX)
            except SourceError:
                refused += 1  # the link was seen and judged: fine
                continue
            if SECRET in doc.text:
                outside += 1
            else:
                inside += 1
    assert swapper.swaps > reads // 10, "the race did not run"
    assert inside > 0, f"no read got through ({refused} refused)"
    assert outside == 0, f"{outside} of {reads} reads returned the file outside the share"


def test_a_build_during_the_swap_race_indexes_no_outside_bytes(racy_share: Path) -> None:
    for i in range(30):
        (racy_share / "d" / f"n{i}.txt").write_text(f"note {i} of the share\n")
        (racy_share / "x" / f"n{i}.txt").write_text(f"{SECRET} note {i}\n")
    collector = Collector()
    texts: list[str] = []
    with Swapper(racy_share / "d", racy_share / "x"):
        for _ in range(15):
            for doc, _unused in collector.iter_all(
                racy_share, BuildReport(), lambda *a: None, lambda d: None
            ):
                texts.append(doc.text)
    assert texts, "nothing was read"
    assert not [t for t in texts if SECRET in t]


def test_a_link_inside_the_root_is_still_followed_and_an_outward_one_refused(
    racy_share: Path,
) -> None:
    (racy_share / "alias.txt").symlink_to(racy_share / "d" / "app.txt")
    doc = read_document(racy_share / "alias.txt", racy_share, max_bytes=MAX)
    assert isinstance(doc, Document)
    assert (doc.source, doc.text) == ("alias.txt", "inside text of the share")
    with pytest.raises(SourceError, match="outside the root"):
        read_document(racy_share / "x" / "app.txt", racy_share, max_bytes=MAX)


def test_a_component_that_keeps_turning_into_a_link_is_unavailable_not_followed(
    racy_share: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every walk meets a link where the resolved path had a folder: retried, then 'not now'."""
    real_open = os.open
    walks: list[str] = []

    def swapped(path: str, flags: int, *args: int, dir_fd: int | None = None) -> int:
        if dir_fd is not None and path == "d":
            walks.append(path)
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        return real_open(path, flags, *args, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", swapped)
    with pytest.raises(SourceUnavailableError, match="replaced by a link"):
        open_inside(racy_share / "d" / "app.txt", racy_share, "d/app.txt")
    assert len(walks) == 3


def test_a_listing_during_the_swap_race_names_no_outside_file(racy_share: Path) -> None:
    outside = (racy_share / "x").resolve()
    for i in range(20):
        (outside / f"secret{i}.txt").write_text("private\n")
    listed: set[str] = set()
    with Swapper(racy_share / "d", racy_share / "x") as swapper:
        for _ in range(300):
            listed.update(p.name for p, _error in iter_files(racy_share))
    assert swapper.swaps > 0
    assert "app.txt" in listed
    assert not [name for name in listed if name.startswith("secret")]
