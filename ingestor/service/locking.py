"""One writer per state dir: an ``flock`` on ``<state_dir>/adrap.lock`` held while a command writes.

The lock file holds one JSON line naming the holder (pid, command and, for the daemon, its HTTP
address), so a second writer can say who is in the way and ``adrap query`` can find the daemon that
owns an embedded store. The kernel releases the lock when the holder exits, even after ``kill -9``.

Read-only commands that open the embedded store themselves (no daemon) hold a *shared* lock on the
same file (:func:`reader_lock`) and never create or write it. A writer that finds only readers in
its way waits for them (they are short) instead of failing, so a query run while the daemon starts
can never make the daemon fail to open its store.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ingestor.errors import IngestError

log = logging.getLogger(__name__)

LOCK_NAME = "adrap.lock"
#: Commands a running ``adrap watch`` makes needless: it applies the folder's changes itself.
WATCHED = frozenset({"add", "remove"})


#: Seconds a writer waits for read-only commands (shared lock holders) to finish. Long: once it
#: has announced itself no new reader enters, and failing would let a query kill the daemon.
READER_WAIT = 600.0


class LockedError(IngestError):
    """Another process holds the state dir's writer lock."""


class WriterActiveError(LockedError):
    """A writer holds the lock, so a reader must go through it (or wait for it)."""

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.holder = holder


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
    """Return the description of the writer holding (or waiting for) the lock, or None if free.

    A writer that waits for read-only commands has already written its description into the
    lock file; readers treat it as holding the lock, so they cannot starve it.
    """
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
        return _waiting_writer(path)
    finally:
        os.close(fd)


def _waiting_writer(path: Path) -> dict[str, Any] | None:
    """Return the description in an unlocked lock file if its process is alive (it waits)."""
    info = _parse(path)
    if info.get("pid") == os.getpid() or not _alive(info):
        return None
    return info


def _alive(info: dict[str, Any]) -> bool:
    """Return True if the description names a running process (not one killed with -9)."""
    pid = info.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    return True


def _parse(path: Path) -> dict[str, Any]:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


@contextmanager
def reader_lock(state_dir: Path) -> Iterator[None]:
    """Hold a shared lock on ``state_dir`` while a read-only command uses the embedded store.

    Creates nothing: without a lock file (no writer ever ran here) nothing is locked.

    Raises:
        WriterActiveError: a writer holds the lock; ``holder`` describes it.
    """
    path = state_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield
        return
    except PermissionError:
        raise  # another account's tree: the CLI's one line names whose, and the daemon's doors
    except OSError as exc:
        raise LockedError(
            f"cannot open the lock file {str(path)!r} ({exc.strerror or exc}); check its permissions"
        ) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            holder = _waiting_writer(path)  # a writer waiting for readers goes first
            if holder is None:
                waiting = False
            else:
                waiting = True
                fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            holder = _parse(path)
            waiting = True
        if waiting:
            assert holder is not None
            raise WriterActiveError(
                f"state dir {str(state_dir)!r} is in use by process {holder.get('pid', '?')} "
                f"(adrap {holder.get('command', '?')}) since a moment ago; run the command again",
                holder,
            )
        yield
    finally:
        os.close(fd)  # releases the shared lock


@contextmanager
def state_lock(
    state_dir: Path, command: str, *, reader_wait: float = READER_WAIT
) -> Iterator[StateLock]:
    """Hold the writer lock of ``state_dir`` for the ``with`` block.

    Read-only commands holding the shared lock are waited for, up to ``reader_wait`` seconds.

    Raises:
        LockedError: another writer holds it (the message names its pid and command), readers
            still hold it after ``reader_wait``, or the lock file cannot be created.
        PermissionError: the state dir is another account's.
    """
    path = state_dir / LOCK_NAME
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except PermissionError:
        raise  # another account's tree: the CLI's one line names whose, and the daemon's doors
    except OSError as exc:
        raise LockedError(
            f"cannot open the lock file {str(path)!r} ({exc.strerror or exc}); check "
            "ADRAP_STATE_DIR and its permissions"
        ) from exc
    deadline = time.monotonic() + reader_wait
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = _parse(path)
            if (told and holder.get("pid") == os.getpid()) or not _alive(holder):
                holder = {}  # our own announcement, or left by a killed writer: readers only
            if "pid" not in holder and time.monotonic() < deadline:
                # only read-only commands (shared locks, which write nothing) are in the way
                if not told:
                    log.info("waiting for read-only adrap commands to release %s", state_dir)
                    # say who waits: new readers then go through (or wait for) this writer
                    info = {"pid": os.getpid(), "command": command, "waiting": True}
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
                    told = True
                time.sleep(0.05)
                continue
            if told:
                os.ftruncate(fd, 0)
            os.close(fd)
            if "pid" not in holder:
                raise LockedError(
                    f"state dir {str(state_dir)!r} is still used by read-only adrap commands "
                    f"(queries) after {reader_wait:.0f} s; let them finish and try again"
                ) from None
            who = f"process {holder.get('pid', '?')} (adrap {holder.get('command', '?')})"
            if holder.get("command") == "watch" and command in WATCHED:
                raise LockedError(
                    f"state dir {str(state_dir)!r} is kept by {who}: it applies what changes in "
                    "its folder by itself (a file saved there is added, one deleted or moved "
                    f"out is removed), so `adrap {command}` is not needed while it runs; "
                    "`adrap status` shows what it has pending"
                ) from None
            raise LockedError(
                f"state dir {str(state_dir)!r} is locked by {who}; stop it first (`kill "
                f"{holder.get('pid', 'PID')}` sends SIGTERM) or use another ADRAP_STATE_DIR"
            ) from None
    lock = StateLock(path, fd, {"pid": os.getpid(), "command": command})
    secure_state_dir(state_dir)
    # What the writer creates in the state dir (the store's files, the state database, ledgers)
    # is its account's alone; the share is never written, so nothing else is affected.
    umask = os.umask(0o077)
    try:
        lock.describe()
        log.debug("locked %s for adrap %s", path, command)
        yield lock
    finally:
        os.umask(umask)
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


#: Files of the state dir others may reach: the daemon's socket (who connects is checked).
_SHARED_NAMES = frozenset({"daemon.sock"})


def secure_state_dir(state_dir: Path) -> None:
    """Keep a tree's state private to its writer's account: the dir 0711 (others may reach the
    daemon's socket in it, never list it), its files 0600 and its folders 0700, so no other local
    user reads the store or the state without the daemon's doors. A dir owned by another account
    is left as it is."""
    try:
        if state_dir.stat().st_uid != os.getuid():
            return
        os.chmod(state_dir, 0o711)
        for entry in os.scandir(state_dir):
            if entry.name in _SHARED_NAMES or entry.is_symlink():
                continue
            mode = 0o700 if entry.is_dir(follow_symlinks=False) else 0o600
            if stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) != mode:
                os.chmod(entry.path, mode)
    except OSError as exc:
        log.warning("cannot make the state dir %s private (%s); check its owner", state_dir, exc)
