"""What kind of filesystem holds the watched folder: network shares are watched by polling.

inotify (watchdog's native observer on Linux) sees only the changes made through this machine's
kernel: a document saved on an SMB/CIFS or NFS share by another computer, or through a FUSE
filesystem, makes no event here. On such a mount the daemon polls unless told otherwise.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["NETWORK_FS", "filesystem_of", "is_network_fs", "polls_by_default"]

#: Filesystem types whose changes by other machines inotify does not report.
NETWORK_FS = frozenset(
    {"cifs", "smb3", "smbfs", "nfs", "nfs4", "9p", "afs", "ceph", "glusterfs", "lustre", "gpfs",
     "davfs", "vboxsf", "vmhgfs", "prl_fs", "virtiofs", "fuse", "fuseblk"}
)  # fmt: skip

_MOUNTINFO = Path("/proc/self/mountinfo")


def filesystem_of(path: Path, mountinfo: str | None = None) -> str | None:
    """Return the filesystem type of the mount holding ``path`` (``cifs``, ``ext4``), or None.

    Reads ``/proc/self/mountinfo`` (Linux; ``mountinfo`` replaces it in tests): the mount whose
    mount point is the longest prefix of the resolved path wins. None elsewhere or if unreadable.
    """
    if mountinfo is None:
        try:
            mountinfo = _MOUNTINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    try:
        target = path.resolve()
    except (OSError, RuntimeError):
        target = Path(os.path.abspath(path))
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        point = Path(_unescape(fields[4]))
        if target == point or target.is_relative_to(point):
            depth = len(point.parts)
            if best is None or depth >= best[0]:
                best = (depth, right.split()[0])
    return best[1] if best else None


def is_network_fs(fstype: str | None) -> bool:
    """True for a network or FUSE filesystem (``fuse.sshfs``, ``fuse.rclone`` included)."""
    return fstype is not None and (fstype in NETWORK_FS or fstype.startswith("fuse."))


def polls_by_default(root: Path) -> bool:
    """Poll a network share (SMB, NFS, FUSE): inotify misses other machines' changes."""
    fstype = filesystem_of(root)
    if is_network_fs(fstype):
        log.info(
            "%s is on a %s mount: polling (native events miss changes made by other "
            "machines); set ADRAP_WATCH__POLLING=false to use native events",
            root,
            fstype,
        )
        return True
    return False


def _unescape(field: str) -> str:
    """Undo mountinfo's octal escapes (``\\040`` is a space)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)
