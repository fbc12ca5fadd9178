"""Free disk space for the embedded store's writes.

qdrant-edge keeps vectors, payloads and indexes in memory-mapped files. A write into one of them
on a full disk is not an error the engine can return: the kernel ends the process with SIGBUS in
the middle of an update, with no message (a daemon restarted by its supervisor then dies again at
its first write). So the store checks before it writes: every write needs ``reserve`` bytes free
on the store's disk (``ADRAP_MIN_FREE_MB``), an index build (optimize) also the store's own size,
since it writes the merged segments before it deletes the old ones. Writing commands check the
reserve before they read anything (:func:`check_room`), so no work is spent on an update that
cannot land.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Final

from retriever.errors import StoreFullError

MIB: Final = 1 << 20
#: The default reserve (``ADRAP_MIN_FREE_MB``): a new appendable segment maps 32 MiB per vector
#: name and a few MiB per payload index before its first point.
DEFAULT_RESERVE: Final = 256 * MIB


def _existing(path: Path) -> Path:
    """``path``, or its nearest existing parent (a store not created yet)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on the filesystem holding ``path`` (or its
    nearest existing parent)."""
    return shutil.disk_usage(_existing(path)).free


#: Files a write may need to create: an index build writes a new segment (about 50 files).
MIN_FREE_FILES: Final = 1000


def free_files(path: Path) -> int | None:
    """Files (inodes) an unprivileged process may still create on the filesystem holding
    ``path``; None where it keeps no count (btrfs and others report 0 of 0)."""
    st = os.statvfs(_existing(path))
    return int(st.f_favail) if st.f_files > 0 else None


def used_bytes(folder: Path) -> int:
    """Bytes the files under ``folder`` take on disk (their allocated blocks: a sparse file
    counts what it holds, not its length)."""
    total = 0
    for top, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
            except OSError:  # gone meanwhile
                continue
    return total


#: What a refused command tells its user to do once there is room.
RUN_AGAIN: Final = "then run the command again; nothing was changed"


#: Filesystems that keep their pages in memory: there, reading a hole of a mapped file allocates
#: it, and opening a store (the engine maps its files and reads them in) fills every hole: 140 MiB
#: for an empty store, which kills the opening process with SIGBUS when the filesystem is full.
MEMORY_FILESYSTEMS: Final = frozenset({"tmpfs", "ramfs"})


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem holding ``path`` (``ext4``, ``tmpfs``...), from Linux's
    ``/proc/self/mountinfo``; None where it cannot be told."""
    real = os.path.realpath(path)
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields = line.split()
                if "-" not in fields[6:]:
                    continue
                mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, fields[fields.index("-", 6) + 1]
    except (OSError, IndexError):
        return None
    return kind


def open_fill(folder: Path) -> int:
    """Bytes that opening the store in ``folder`` allocates: on a memory filesystem, the holes of
    the files the engine reads in as it opens (its vectors' chunks and its payload indexes:
    measured with qdrant-edge 0.9, 137 MiB of holes there, 136 MiB allocated by the open; the
    write-ahead log and payload pages are filled by writes only); elsewhere none (reading a
    hole on a disk writes nothing)."""
    if filesystem_type(folder) not in MEMORY_FILESYSTEMS:
        return 0
    total = 0
    for top, _, files in os.walk(folder):
        read_in = "payload_index" in Path(top).parts or Path(top).name == "vectors"
        for name in files:
            if not read_in or (Path(top).name == "vectors" and not name.startswith("chunk_")):
                continue
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            total += max(0, st.st_size - st.st_blocks * 512)
    return total


def check_open(folder: Path) -> None:
    """Raise unless the filesystem holding ``folder`` has room for what opening its store fills.

    Raises:
        StoreFullError: opening it would fill a memory filesystem (the process would be killed).
    """
    fill = open_fill(folder)
    free = free_bytes(folder) if fill else 0
    if fill > free:
        raise StoreFullError(
            f"cannot open the embedded store {folder}: opening it fills {fill / MIB:.0f} MiB of "
            f"its memory-mapped files on this {filesystem_type(folder)} (a filesystem in memory), "
            f"which has {free / MIB:.0f} MiB free; free space on it or give it more (its size= "
            "option), then run the command again; nothing was changed"
        )


def room_problem(
    path: Path, reserve: int, action: str, *, extra: int = 0, then: str = RUN_AGAIN
) -> str | None:
    """Why ``action`` must not write under ``path`` now (too little free space), or None.

    ``reserve`` 0 never refuses; ``then``: what happens once there is room."""
    if reserve <= 0:
        return None
    need = reserve + extra
    free = free_bytes(path)
    files = free_files(path)
    if files is not None and files < MIN_FREE_FILES:
        return (
            f"no room to {action}: {files} more files may be made on the disk holding {path} "
            f"(its inodes are used up, {free / MIB:.0f} MiB free): the embedded store makes new "
            f"files as it writes; delete files on that disk or move the tree (--state-dir), {then}"
        )
    if free >= need:
        return None
    return (
        f"not enough free disk space to {action}: {free / MIB:.0f} MiB free on the disk holding "
        f"{path}, {need / MIB:.0f} MiB needed (ADRAP_MIN_FREE_MB keeps {reserve / MIB:.0f} MiB "
        "free: a write into the embedded store's memory-mapped files on a full disk kills the "
        f"process); free space on that disk or move the tree to a larger one (--state-dir), {then}"
    )


def check_room(path: Path, reserve: int, action: str, *, extra: int = 0) -> None:
    """Raise unless ``reserve`` (+ ``extra``) bytes are free on the disk holding ``path``.

    Raises:
        StoreFullError: too little space; the message says how much is free and needed.
    """
    problem = room_problem(path, reserve, action, extra=extra)
    if problem is not None:
        raise StoreFullError(problem)
