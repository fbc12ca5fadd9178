"""A file reached through a symbolic link: who may read it is decided by the kernel's walk to the
target, so every folder that walk searches counts, not only the link's own folders.

``public/pay.txt -> ../hr/pay.txt`` with ``hr/`` closed to others: the kernel refuses the link
to anyone who cannot search ``hr/``, whatever the file's own mode says; before, the class was
the link's folder and the target's mode, and a summary of HR's payroll reached every reader of
``public/``. The last test checks each shape against the kernel itself (``os.access`` in a
process that became the user)."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from ingestor.read.access_classes import UNKNOWN, Identity
from ingestor.read.permissions import MAX_LINKS, AccessFile, AccessReader
from tests.unit.service.test_access_doors import as_user, users  # noqa: F401 (a fixture)

OTHER = Identity("someone else", 54321, frozenset({54321}))


@pytest.fixture
def share() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="adrap-links-"))
    os.chmod(base, 0o755)
    root = base / "share"
    for folder, mode in (("hr", 0o700), ("public", 0o755), ("eng", 0o755), ("deep/er", 0o755)):
        (root / folder).mkdir(parents=True)
        os.chmod(root / folder, mode)
    os.chmod(root, 0o755)
    os.chmod(root / "deep", 0o755)
    (root / "hr" / "pay.txt").write_text("pay")
    (root / "public" / "note.txt").write_text("note")
    for f in (root / "hr" / "pay.txt", root / "public" / "note.txt"):
        os.chmod(f, 0o644)
    try:
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _link(root: Path, rel: str, target: str) -> str:
    (root / rel).symlink_to(target)
    return rel


def _reads(root: Path, source: str, who: Identity = OTHER) -> bool:
    return AccessReader(root, AccessFile()).class_of(source).allows(who)


def test_a_link_into_a_closed_folder_is_closed_too(share: Path) -> None:
    assert not _reads(share, "hr/pay.txt")
    link = _link(share, "public/pay.txt", "../hr/pay.txt")
    assert not _reads(share, link), "the kernel cannot resolve it without search on hr/"
    assert _reads(share, _link(share, "public/n.txt", "note.txt"))
    os.chmod(share / "hr", 0o711)
    assert _reads(share, link), "search on hr/ opens it, as it opens hr/pay.txt"


def test_every_folder_of_every_hop_counts(share: Path) -> None:
    hop = _link(share, "eng/hop.txt", "../hr/pay.txt")
    first = _link(share, "public/first.txt", "../eng/hop.txt")
    assert not _reads(share, first)
    os.chmod(share / "hr", 0o711)
    assert _reads(share, first)
    os.chmod(share / "eng", 0o700)  # the middle hop's folder closed
    assert not _reads(share, first)
    assert not _reads(share, hop)
    absolute = _link(share, "public/abs.txt", str(share / "deep" / ".." / "hr" / "pay.txt"))
    os.chmod(share / "deep", 0o700)
    assert not _reads(share, absolute), "'..' is looked up in deep/: it needs search there"
    os.chmod(share / "deep", 0o711)
    assert _reads(share, absolute)


def test_a_link_that_leaves_the_root_or_loops_is_the_owners_only(share: Path) -> None:
    outside = share.parent / "outside.txt"
    outside.write_text("out")
    os.chmod(outside, 0o644)
    reader = AccessReader(share, AccessFile())
    assert reader.class_of(_link(share, "public/out.txt", "../../outside.txt")) is UNKNOWN
    assert reader.class_of(_link(share, "public/abs-out.txt", str(outside))) is UNKNOWN
    _link(share, "public/a", "b")
    _link(share, "public/b", "a")
    assert reader.class_of("public/a") is UNKNOWN
    chain = [_link(share, f"public/c{i}", f"c{i + 1}") for i in range(MAX_LINKS + 1)]
    (share / "public" / f"c{MAX_LINKS + 1}").write_text("end")
    assert reader.class_of(chain[0]) is UNKNOWN, "more links than the kernel follows"
    assert reader.class_of(chain[2]).allows(OTHER)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd"
)
def test_the_class_of_a_link_agrees_with_the_kernel(
    share: Path,
    users: dict[str, int],  # noqa: F811
) -> None:
    alice = users["alice"]
    links = {
        "public/pay.txt": "../hr/pay.txt",
        "eng/hop.txt": "../hr/pay.txt",
        "public/first.txt": "../eng/hop.txt",
        "public/abs.txt": str(share / "deep" / "er" / ".." / ".." / "hr" / "pay.txt"),
        "deep/er/up.txt": "../../public/note.txt",
    }
    for rel, target in links.items():
        _link(share, rel, target)
    folders = ("hr", "eng", "deep", "deep/er", "public")
    rng = random.Random(0)
    for round_ in range(24):  # each folder open to alice's search or not, drawn
        for folder in folders:
            os.chmod(share / folder, rng.choice((0o711, 0o700)))
        reader = AccessReader(share, AccessFile())
        for rel in links:
            kernel = as_user(alice, partial(os.access, share / rel, os.R_OK))
            ours = reader.class_of(rel).allows(Identity.of_uid(alice))
            assert ours == kernel, f"round {round_}, {rel}: the kernel says {kernel}, we {ours}"
