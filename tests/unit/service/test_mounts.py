"""Network shares are watched by polling: the filesystem of the watched folder decides."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestor.service.mounts import filesystem_of, is_network_fs

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/share rw,relatime shared:20 - cifs //fs/docs rw,vers=3.1.1
41 40 0:36 / /mnt/share/local rw,relatime shared:21 - ext4 /dev/sdb1 rw
42 22 0:37 / /mnt/nfs\\040home rw,relatime - nfs4 srv:/home rw
43 22 0:38 / /home/u/remote rw,nosuid - fuse.sshfs u@host: rw
"""


@pytest.mark.parametrize(
    ("path", "fstype"),
    [
        ("/home/u/notes", "ext4"),
        ("/mnt/share/reports/q3", "cifs"),
        ("/mnt/share/local/x", "ext4"),  # the deepest mount wins
        ("/mnt/nfs home/a", "nfs4"),  # mountinfo escapes spaces
        ("/home/u/remote/docs", "fuse.sshfs"),
    ],
)
def test_the_deepest_mount_holding_the_path_names_its_filesystem(path: str, fstype: str) -> None:
    assert filesystem_of(Path(path), MOUNTINFO) == fstype


@pytest.mark.parametrize(
    ("fstype", "network"),
    [("cifs", True), ("nfs4", True), ("fuse.sshfs", True), ("ext4", False), (None, False)],
)
def test_network_and_fuse_filesystems_are_polled(fstype: str | None, network: bool) -> None:
    assert is_network_fs(fstype) is network


def test_this_machine_reports_a_filesystem_for_its_temp_folder(tmp_path: Path) -> None:
    assert filesystem_of(tmp_path) is not None
