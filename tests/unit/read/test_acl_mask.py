"""A POSIX ACL whose mask is empty: the kernel skips the ACL and the mode bits decide (Linux's
``acl_permission_check`` checks the ACL only where the mode's group bits, the mask, are set), so
a named user then gets what "other" gets. The access class follows the kernel, here checked
against the kernel itself: a real folder, ``setfacl``, ``chmod``, and ``os.access`` in a process
that became the user (acl(5) alone would deny, withholding a file the user may read)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ingestor.read.access_classes import Identity, Step
from ingestor.read.permissions import AccessFile, AccessReader
from tests.unit.service.test_access_doors import as_user, users  # noqa: F401 (a fixture)

USER, NAMED_USER, GROUP_OBJ, MASK, OTHER = 0x01, 0x02, 0x04, 0x10, 0x20  # acl(5) tags


def test_an_empty_mask_lets_the_mode_bits_decide() -> None:
    acl = ((USER, -1, 7), (NAMED_USER, 1003, 5), (GROUP_OBJ, -1, 5), (MASK, -1, 0), (OTHER, -1, 1))
    folder = Step(uid=1001, gid=0, mode=0o701, need=1, acl=acl)
    assert folder.allows(Identity("bob", 1003, frozenset({100}))), "other's x, as the kernel"
    assert not folder.allows(Identity("root group", 1004, frozenset({0}))), "group bits: none"
    masked = Step(uid=1001, gid=0, mode=0o711, need=1, acl=(*acl[:3], (MASK, -1, 1), *acl[4:]))
    assert masked.allows(Identity("bob", 1003, frozenset({100})))
    denied = Step(uid=1001, gid=0, mode=0o741, need=1, acl=(*acl[:3], (MASK, -1, 4), *acl[4:]))
    assert not denied.allows(Identity("bob", 1003, frozenset({100}))), "r-x & r-- lacks x"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setfacl") is None or shutil.which("useradd") is None,
    reason="needs root, setfacl and useradd",
)
def test_the_class_agrees_with_the_kernel_for_a_named_user_under_an_empty_mask(
    users: dict[str, int],  # noqa: F811
) -> None:
    base = Path(tempfile.mkdtemp(prefix="adrap-mask-"))
    try:
        os.chmod(base, 0o755)
        root = base / "share"
        folder = root / "hr"
        folder.mkdir(parents=True)
        os.chmod(root, 0o755)
        f = folder / "pay.txt"
        f.write_text("pay")
        os.chmod(f, 0o644)
        os.chown(folder, users["alice"], 0)
        bob = users["bob"]
        subprocess.run(["setfacl", "-m", f"u:{bob}:rx", str(folder)], check=True)
        for mode in (0o701, 0o700, 0o751, 0o741, 0o711):
            os.chmod(folder, mode)  # sets the mask to the group bits
            kernel = as_user(bob, lambda: os.access(f, os.R_OK))
            cls = AccessReader(root, AccessFile()).class_of("hr/pay.txt")
            ours = cls.allows(Identity.of_uid(bob))
            assert ours == kernel, f"mode {mode:o}: the kernel says {kernel}, the class {ours}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
