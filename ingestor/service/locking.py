"""One writer per state dir: an ``flock`` on ``<state_dir>/adrap.lock`` held while a command writes.

The lock file holds one JSON line naming the holder (pid, command and, for the daemon, its HTTP
address), so a second writer can say who is in the way and ``adrap query`` can find the daemon that
owns an embedded store. The kernel releases the lock when the holder exits, even after ``kill -9``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ingestor.errors import IngestError

log = logging.getLogger(__name__)

LOCK_NAME = "adrap.lock"


class LockedError(IngestError):
    """Another process holds the state dir's writer lock."""


class StateLock:
    """The held writer lock of one state dir; ``describe`` updates what the lock file says."""

    def __init__(self, path: Path, fd: int, info: dict[str, Any]) -> None:
        self.path = path
        self._fd = fd
        self.info = info

    def describe(self, **extra: Any) -> None:
        """Add ``extra`` to the holder's description in the lock file (e.g. the HTTP address)."""
        self.info |= extra
        data = (json.dumps(self.info) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


def read_holder(state_dir: Path) -> dict[str, Any] | None:
    """Return the description of the process holding the lock of ``state_dir``, or None if free."""
    path = state_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _parse(path)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _parse(path: Path) -> dict[str, Any]:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


@contextmanager
def state_lock(state_dir: Path, command: str) -> Iterator[StateLock]:
    """Hold the writer lock of ``state_dir`` for the ``with`` block.

    Raises:
        LockedError: another process holds it (the message names its pid and command), or the
            lock file cannot be created.
    """
    path = state_dir / LOCK_NAME
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise LockedError(
            f"cannot open the lock file {str(path)!r} ({exc.strerror or exc}); check "
            "ADRAP_STATE_DIR and its permissions"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = _parse(path)
        who = f"process {holder.get('pid', '?')} (adrap {holder.get('command', '?')})"
        raise LockedError(
            f"state dir {str(state_dir)!r} is locked by {who}; stop it first (`kill "
            f"{holder.get('pid', 'PID')}` sends SIGTERM) or use another ADRAP_STATE_DIR"
        ) from None
    lock = StateLock(path, fd, {"pid": os.getpid(), "command": command})
    try:
        lock.describe()
        log.debug("locked %s for adrap %s", path, command)
        yield lock
    finally:
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
