"""The access file (``access.toml``, for mounts without useful permissions): a prefix names a
folder (or one file) by whole names. ``prefix = "public"`` with ``anyone = true`` gave everyone
``publicity/launch.txt`` too, a folder of the owner's alone; and a link under a listed prefix is
judged at its target as well, as a link is on the file system."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ingestor.pipeline.access import TreeAccess
from ingestor.read.access_classes import Identity
from ingestor.read.permissions import AccessFile, AccessReader

ANYONE = Identity("someone else", 54321, frozenset({54321}))


def _edit(path: Path, text: str, age: float = 5.0) -> None:
    """Write ``path`` as an edit finished ``age`` seconds ago."""
    path.write_text(text)
    then = time.time_ns() - int(age * 1e9)
    os.utime(path, ns=(then, then))


def _access_file(tmp_path: Path, text: str) -> AccessFile:
    path = tmp_path / "access.toml"
    path.write_text(text)
    return AccessFile.load(path)


def _share(tmp_path: Path) -> Path:
    root = tmp_path / "share"
    for rel, mode in (("public/a.txt", 0o600), ("publicity/launch.txt", 0o600),
                      ("hr/pay.txt", 0o644), ("reviews/a.txt", 0o644),
                      ("reviews/a.txt.bak", 0o644)):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
        os.chmod(root / rel, mode)
    for folder in ("public", "hr", "reviews"):
        os.chmod(root / folder, 0o755)
    os.chmod(root / "publicity", 0o700)
    return root


def test_a_prefix_is_a_path_of_whole_names(tmp_path: Path) -> None:
    gid = os.getgid()
    rules = _access_file(
        tmp_path,
        f'[[folder]]\nprefix = "public"\nanyone = true\n\n'
        f'[[folder]]\nprefix = "/hr/"\ngroups = ["{gid}"]\n\n'
        f'[[folder]]\nprefix = "reviews/a.txt"\nusers = ["{os.getuid()}"]\n',
    )
    assert rules.rule_for("public/a.txt") is not None
    assert rules.rule_for("public/deep/b.txt") is not None
    assert rules.rule_for("publicity/launch.txt") is None
    assert rules.rule_for("public.txt") is None
    assert rules.rule_for("hr/pay.txt") is not None
    assert rules.rule_for("hr-archive/pay.txt") is None
    assert rules.rule_for("reviews/a.txt") is not None
    assert rules.rule_for("reviews/a.txt.bak") is None

    root = _share(tmp_path)
    reader = AccessReader(root, rules)
    assert reader.class_of("public/a.txt").allows(ANYONE), "the rule replaces mode 600"
    assert not reader.class_of("publicity/launch.txt").allows(ANYONE), "the file system's 700"
    assert reader.class_of("reviews/a.txt.bak").allows(ANYONE), "the file system's 644"
    assert not reader.class_of("reviews/a.txt").allows(ANYONE), "the rule: its user alone"


def test_a_link_under_a_prefix_is_judged_at_its_target_too(tmp_path: Path) -> None:
    gid = os.getgid()
    rules = _access_file(
        tmp_path,
        f'[[folder]]\nprefix = "public/"\nanyone = true\n\n'
        f'[[folder]]\nprefix = "hr/"\ngroups = ["{gid}"]\n',
    )
    root = _share(tmp_path)
    (root / "public" / "pay.txt").symlink_to("../hr/pay.txt")
    (root / "public" / "mine.txt").symlink_to("a.txt")
    reader = AccessReader(root, rules)
    member = Identity("member", 54322, frozenset({gid}))
    assert not reader.class_of("public/pay.txt").allows(ANYONE), "hr/'s rule holds"
    assert reader.class_of("public/pay.txt").allows(member)
    assert reader.class_of("public/mine.txt").allows(ANYONE)
    (root / "hr" / "in.txt").symlink_to("../public/a.txt")
    assert not reader.class_of("hr/in.txt").allows(ANYONE), "the link's own prefix holds"
    assert reader.class_of("hr/in.txt").allows(member)


def test_an_edited_access_file_counts_from_the_next_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An edit of the access file is a permission change: read again when a pass begins (the
    daemon's every few seconds); a malformed edit keeps the rules it had, saying why."""
    root = _share(tmp_path)
    path = tmp_path / "access.toml"
    path.write_text('[[folder]]\nprefix = "public"\nanyone = true\n')
    access = TreeAccess(None, AccessFile.load(path), path)

    def readers(source: str) -> bool:
        access.begin(root)
        return access.reader(root).class_of(source).allows(ANYONE)

    assert readers("public/a.txt")
    _edit(path, '[[folder]]\nprefix = "public"\nusers = ["0"]\n')
    assert not readers("public/a.txt"), "the edit counts at the next pass"
    _edit(path, '[[folder]]\nprefix = "public"\nusers = ["no-such-user-here"]\n')
    assert not readers("public/a.txt"), "a bad edit keeps the rules it had"
    assert "no-such-user-here" in caplog.text
    path.unlink()
    assert not readers("public/a.txt"), "gone: the file system's mode 600"


def test_a_half_written_access_file_is_read_once_it_is_still(tmp_path: Path) -> None:
    """A pass that met the file truncated (``>``, ``cat >``, a tool that writes in place) read
    it as empty: no rules, so for a pass every file fell to the file system's permissions, which
    on the mounts this file is for let everyone read. An edit counts once it is still."""
    root = _share(tmp_path)
    os.chmod(root / "hr" / "pay.txt", 0o644)  # what a FUSE mount shows: anyone may read
    path = tmp_path / "access.toml"
    _edit(path, f'[[folder]]\nprefix = "hr"\nusers = ["{os.getuid()}"]\n')
    access = TreeAccess(None, AccessFile.load(path), path)

    def anyone_reads() -> bool:
        access.begin(root)
        return access.reader(root).class_of("hr/pay.txt").allows(ANYONE)

    assert not anyone_reads()
    _edit(path, "", age=0)  # truncated, its new text not written yet
    assert not anyone_reads(), "a file written a moment ago waits: the rules it had hold"
    _edit(path, f'[[folder]]\nprefix = "hr/"\nusers = ["{os.getuid()}"]\nanyone = false\n', 0)
    assert not anyone_reads()
    assert not anyone_reads(), "found unchanged by a second pass: read"
    assert [(r.prefix, r.anyone) for r in access.access_file.rules] == [("hr/", False)]
    _edit(path, '[[folder]]\nprefix = "hr/"\nanyone = true\n')
    assert anyone_reads(), "an edit finished a while ago counts at once"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[[folders]]\nprefix = "hr/"\ngroups = ["0"]\n', "did you mean 'folder'"),
        ('[[folder]]\nprefix = "hr/"\ngroup = ["0"]\n', "did you mean 'groups'"),
        ('[[folder]]\nprefix = "hr/"\nanyone = "false"\n', "a TOML boolean"),
        ('[[folder]]\nprefix = "hr/"\nusers = "0"\n', "write a list of names or ids"),
        ('[[folder]]\nprefix = "hr/"\nusers = [true]\n', "write a list of names or ids"),
        ("[[folder]]\nprefix = 3\n", "needs a prefix"),
        ('folder = "hr/"\n', "[[folder]] table"),
        ('[[folder]]\nprefix = "hr"\nusers = ["0"]\n[[folder]]\nprefix = "/hr/"\n', "twice"),
        ('sids = ["S-1-1-0"]\n', "[sids] as a table"),
    ],
)
def test_a_misspelt_or_mistyped_access_file_is_refused(
    tmp_path: Path, text: str, said: str
) -> None:
    """Each of these was read as fewer rules than written (``anyone = "false"`` as anyone may
    read): its files fell to the file system's permissions, which on the mounts the file is for
    let everyone read. Each is refused, saying what to write."""
    with pytest.raises(ValueError, match=r"access\.toml") as err:
        _access_file(tmp_path, text)
    assert said in str(err.value)
