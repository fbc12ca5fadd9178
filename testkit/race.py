"""A real symlink-swap race: a folder of a share and a link to a folder outside it exchanged with
``renameat2(RENAME_EXCHANGE)`` (atomic, so the path always exists) as fast as a thread can."""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from pathlib import Path
from typing import Any

RENAME_EXCHANGE = 2
AT_FDCWD = -100
SECRET = "OUTSIDE-ONLY-SECRET"


class RaceUnsupported(RuntimeError):
    """This system cannot exchange two names atomically (no renameat2 or RENAME_EXCHANGE)."""


def _renameat2() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        return libc.renameat2
    except AttributeError:
        raise RaceUnsupported("libc has no renameat2 (glibc < 2.28 or not Linux)") from None


class Swapper:
    """Swaps two names in a loop in a thread until stopped; counts the swaps done.

    Raises:
        RaceUnsupported: the system cannot exchange the two names.
    """

    def __init__(self, a: Path, b: Path) -> None:
        self.a, self.b = os.fsencode(a), os.fsencode(b)
        self.call = _renameat2()
        self.swaps = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="swapper")
        if self.call(AT_FDCWD, self.a, AT_FDCWD, self.b, RENAME_EXCHANGE) != 0:
            code = ctypes.get_errno()
            if code in (errno.EINVAL, errno.ENOSYS):
                raise RaceUnsupported(
                    f"RENAME_EXCHANGE is not supported here ({os.strerror(code)})"
                )
            raise OSError(code, os.strerror(code))

    def run(self) -> None:
        while not self.stop.is_set():
            if self.call(AT_FDCWD, self.a, AT_FDCWD, self.b, RENAME_EXCHANGE) == 0:
                self.swaps += 1

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def racy_share(base: Path, files: int = 1) -> Path:
    """Make ``base/share`` with ``d/`` inside and ``x``, a link to ``base/outside``, whose files
    (same names as ``d``'s) hold :data:`SECRET`; return the share. ``d`` holds ``app.txt`` and
    ``files - 1`` notes ``n<i>.txt``."""
    share = base / "share"
    (share / "d").mkdir(parents=True)
    outside = base / "outside"
    outside.mkdir()
    (share / "d" / "app.txt").write_text("inside text of the share\n")
    (outside / "app.txt").write_text(f"{SECRET} from outside the share\n")
    for i in range(files - 1):
        (share / "d" / f"n{i}.txt").write_text(f"note {i} of the share\n")
        (outside / f"n{i}.txt").write_text(f"{SECRET} note {i}\n")
    (share / "x").symlink_to(outside, target_is_directory=True)
    return share
