"""Open a file of the watched folder as it was resolved, so no race can read outside the folder.

Checking ``path.resolve()`` against the root and then opening the path is a race: between the
two, a folder on the path can be swapped for a symlink to anywhere (``renameat2`` with
``RENAME_EXCHANGE`` does it atomically), and ``O_NOFOLLOW`` guards only the last component. So a
file is opened by walking its resolved path from a descriptor of the root, one component at a
time, each opened relative to the folder before it with ``O_NOFOLLOW`` (``openat``): a component
that became a symlink (or anything but a folder) fails the walk instead of being followed, and
the walk is retried from the start, where the link is judged as any link is (followed only while
it stays inside the root). The file itself is checked with ``lstat`` before it is opened (a FIFO
or a device is never opened) and with ``fstat`` after (the same inode, a regular file).

Readers downstream get the bytes read from that descriptor, never the path: no converter opens
the file again.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ingestor.errors import SourceError, SourceGoneError, SourceUnavailableError
from ingestor.read.names import source_text

__all__ = ["FILE_FLAGS", "open_inside", "refuse_special"]

#: Flags of the file's own open.
FILE_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_BINARY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
    # O_NONBLOCK: a FIFO swapped in after the lstat check must not hang the daemon.
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
)
# A folder of the walk: O_PATH (Linux) needs only search permission, as the kernel's own path
# walk does; elsewhere the folder is opened for reading.
_DIR_FLAGS = (
    (getattr(os, "O_PATH", 0) or os.O_RDONLY)
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOFOLLOW", 0)
)
#: Walks restarted after a component changed under them, before the file counts as unavailable.
ATTEMPTS = 3
# what openat answers when a component is no longer the folder or file that was resolved
_SWAPPED = {errno.ELOOP, errno.ENOTDIR, getattr(errno, "EMLINK", errno.ELOOP)}


class _Swapped(Exception):
    """A component of the resolved path changed (became a link, or not a folder) mid-walk."""


def open_inside(path: Path, root: Path, name: str) -> tuple[int, os.stat_result]:
    """Open the regular file ``path`` under ``root`` for reading; return its fd and ``fstat``.

    A symlink on the way is followed only while its target stays inside ``root``; the file is
    opened through the components of its resolved path, none of which may be a symlink at the
    time it is opened. ``name`` is how messages call the file. The caller closes the fd.

    Raises:
        SourceError: a broken link, a link leading out of ``root``, or not a regular file.
        SourceGoneError: the file (or a folder on its path) vanished.
        SourceUnavailableError: it cannot be read now (permission denied, EIO, a folder on its
            path kept changing into a link while it was opened).
    """
    try:
        real_root = root.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise SourceUnavailableError(
            f"{name!r} cannot be read now: its root {source_text(str(root))!r} cannot be opened "
            f"({getattr(exc, 'strerror', None) or exc}); check that the share is mounted"
        ) from exc
    for _ in range(ATTEMPTS):
        parts = _resolve_inside(path, real_root, name)
        try:
            return _walk_open(real_root, parts, name)
        except _Swapped:
            continue
    raise SourceUnavailableError(
        f"{name!r} cannot be read now: a folder on its path was replaced by a link or a file "
        f"while it was opened ({ATTEMPTS} times); what was read before is kept and it is tried "
        "again"
    )


_SPECIAL = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _not_regular(name: str, mode: int) -> SourceError:
    kind = _SPECIAL.get(stat.S_IFMT(mode), "a folder" if stat.S_ISDIR(mode) else "")
    what = f"{kind}, not a regular file" if kind else "not a regular file"
    return SourceError(f"{name!r} is {what}; only regular files are read")


def refuse_special(path: Path, root: Path, name: str) -> None:
    """Raise the SourceError that names what ``path`` is when it is no file to read at all (a
    named pipe, a socket, a device; a broken or looping link, or one that leaves ``root``), so
    that its refusal says that rather than its suffix. Nothing is opened; a regular file, a
    link to one inside ``root``, or a path that cannot be looked at now returns quietly."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if stat.S_IFMT(mode) in _SPECIAL:
        raise _not_regular(name, mode)
    if stat.S_ISLNK(mode):
        try:
            real_root = root.resolve(strict=True)
            _resolve_inside(path, real_root, name)
        except (OSError, RuntimeError, SourceGoneError, SourceUnavailableError):
            return  # not a refusal for good: the suffix's is


def _resolve_inside(path: Path, real_root: Path, name: str) -> tuple[str, ...]:
    """Return the components of ``path``'s real path under ``real_root``, or say why not."""
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError as exc:
        if path.is_symlink():
            raise SourceError(
                f"{name!r} is a broken symlink to {source_text(os.readlink(path))!r}; fix or remove the link"
            ) from exc
        raise SourceGoneError(
            f"{name!r} vanished before it could be read; nothing to do if it was deleted"
        ) from exc
    except PermissionError as exc:
        raise SourceUnavailableError(
            f"{name!r} cannot be reached now (permission denied on a parent folder); "
            "grant access; what was read before is kept"
        ) from exc
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop on Python 3.11
        if isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP:
            raise SourceError(
                f"{name!r} is a symbolic link that loops (or passes 40 links on its way); fix "
                "or remove the link"
            ) from exc
        raise SourceError(f"{name!r} cannot be resolved ({exc}); fix or remove the link") from exc
    if not real.is_relative_to(real_root):
        raise SourceError(
            f"{name!r} is a symlink to {source_text(str(real))!r}, outside the root; links never leave the "
            "watched folder: copy the file in instead"
        )
    parts = real.relative_to(real_root).parts
    if not parts:
        raise SourceError(f"{name!r} is not a regular file; only regular files are read")
    return parts


def _walk_open(real_root: Path, parts: tuple[str, ...], name: str) -> tuple[int, os.stat_result]:
    fds: list[int] = []
    try:
        fds.append(os.open(real_root, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0)))
        for part in parts[:-1]:
            fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
        leaf = parts[-1]
        # lstat before open: opening a FIFO or a device for reading can block or have effects
        before = os.stat(leaf, dir_fd=fds[-1], follow_symlinks=False)
        if stat.S_ISLNK(before.st_mode):
            raise _Swapped  # resolved as a file, a link now
        if not stat.S_ISREG(before.st_mode):
            raise _not_regular(name, before.st_mode)
        fd = os.open(leaf, FILE_FLAGS, dir_fd=fds[-1])
    except OSError as exc:
        if exc.errno in _SWAPPED:
            raise _Swapped from exc
        raise _os_error(exc, name) from exc
    finally:
        for dir_fd in fds:
            os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (
            before.st_dev,
            before.st_ino,
        ):
            raise _Swapped  # replaced between the lstat and the open
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _os_error(exc: OSError, name: str) -> SourceError:
    if isinstance(exc, FileNotFoundError):
        return SourceGoneError(
            f"{name!r} vanished while being read; nothing to do if it was deleted"
        )
    if isinstance(exc, PermissionError):
        return SourceUnavailableError(
            f"{name!r} cannot be read now (permission denied); grant read access; what was read "
            "before is kept and it is tried again"
        )
    # EBUSY (a document open in Word on an SMB share), EIO (a flaky mount), ESTALE, ...
    return SourceUnavailableError(
        f"{name!r} cannot be read now ({exc.strerror or exc}); what was read before is kept "
        "and it is tried again"
    )
