"""watchdog glue: the observer (native or polling) and a handler that only enqueues changes.

Each queued :class:`Change` says whether the event leaves the file complete: closed after a
write (inotify's ``IN_CLOSE_WRITE``, watchdog's ``EVENT_TYPE_CLOSED``) or the destination of a
move (a rename-over is complete at once). The worker ends a burst whose paths are all complete
after a short grace instead of the full debounce (:mod:`ingestor.service.intake`).
"""

from __future__ import annotations

import fnmatch
import os
import queue
import re
import stat
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from watchdog.events import (
    EVENT_TYPE_ATTRIB,
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver

from ingestor.service.observers import bounded_observer

#: Names whose ignore verdict :class:`PathFilter` keeps (then it starts again).
NAMES_HELD = 65_536

_CHANGES = frozenset(
    {EVENT_TYPE_CREATED, EVENT_TYPE_DELETED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED}
)


def make_observer(
    *, polling: bool = False, interval: float = 2.0, root: Path | None = None
) -> BaseObserver:
    """Return watchdog's native observer, or its polling one (NFS/SMB, Docker bind mounts).

    Neither enters a symlinked folder, as the listing never does
    (:func:`~ingestor.read.listing.iter_files`): the native one watches no link (watchdog's
    default), and the polling one looks at a link to a folder as the link itself
    (:func:`poll_stat`), so a link to a parent folder is not walked until the path is too long.
    Neither watches a folder deeper than the listing lists, nor recurses to reach one
    (:mod:`ingestor.service.observers`): the polling one given the ``root`` it will watch.
    """
    return bounded_observer(root, polling=polling, interval=interval, stat=poll_stat)


def poll_stat(path: str) -> os.stat_result:
    """The polling observer's ``stat``: a link's target's, except for a link to a folder,
    which is its own (``lstat``) so that the snapshot does not descend into it."""
    st = os.lstat(path)
    if not stat.S_ISLNK(st.st_mode):
        return st
    try:
        target = os.stat(path)
    except OSError:  # a broken link, or one that cannot be followed now: the link itself
        return st
    return st if stat.S_ISDIR(target.st_mode) else target


class Change(NamedTuple):
    """One queued event of a path.

    ``changed``: its content (or existence) changed. ``complete``: as of this event no writer
    holds it open (closed after a write, the destination of a move, a new folder), so its burst
    may end after the close grace instead of the debounce. A close without a change in the
    same burst (``changed=False``) adds nothing: what was written is already read.
    """

    path: Path
    changed: bool = True
    complete: bool = False


class EnqueueHandler(FileSystemEventHandler):
    """Puts a :class:`Change` per change event on a queue; nothing else (it runs in watchdog's thread).

    Opened, closed-without-write and attribute events and directory "modified" events (a child
    changed, which has its own event) carry no content change and are not queued: reading a file
    must not trigger a batch. A close after a write is queued as a completion mark only. An
    attribute event (a chmod, chown or setfacl of a file or folder, where the observer sees them)
    sets :attr:`attributes`: the daemon reads the permissions again soon, not at its next pass.
    """

    def __init__(self, paths: queue.Queue[Change | None]) -> None:
        self.paths = paths
        #: Set by an attribute event; cleared by the permission pass that follows.
        self.attributes = threading.Event()

    def on_any_event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        if kind == EVENT_TYPE_ATTRIB:
            self.attributes.set()
            return
        src = Path(os.fsdecode(event.src_path))
        if kind == EVENT_TYPE_CLOSED and not event.is_directory:
            self.paths.put(Change(src, changed=False, complete=True))
            return
        if kind not in _CHANGES or (event.is_directory and kind == EVENT_TYPE_MODIFIED):
            return
        if kind == EVENT_TYPE_MOVED:
            self.paths.put(Change(src))  # like a deletion: a new file may follow under its name
            self.paths.put(Change(Path(os.fsdecode(event.dest_path)), complete=True))
        else:
            self.paths.put(Change(src, complete=event.is_directory and kind == EVENT_TYPE_CREATED))


class PathFilter:
    """Which paths under ``root`` the watcher takes: not ignored, not excluded (links included:
    reading one judges where it leads, see :meth:`Watcher.wanted`)."""

    def __init__(self, root: Path, ignore: Sequence[str], exclude: Iterable[Path]) -> None:
        self.root = Path(os.path.abspath(root))
        self.real_root = self.root.resolve()
        self.ignore = tuple(ignore)
        self.exclude = [Path(os.path.abspath(p)) for p in exclude]
        # one pattern for all, and each name judged once: a batch of a `mkdir -p` 800 deep asked
        # 800 x 800 names x each pattern (15 s of fnmatch)
        pattern = "|".join(fnmatch.translate(os.path.normcase(p)) for p in self.ignore)
        self._ignored = re.compile(pattern or "(?!)")  # fnmatch's: the case as the OS compares
        self._names: dict[str, bool] = {}

    def _ignored_name(self, name: str) -> bool:
        found = self._names.get(name)
        if found is None:
            if len(self._names) >= NAMES_HELD:
                self._names.clear()
            found = self._names[name] = self._ignored.match(os.path.normcase(name)) is not None
        return found

    def named(self, path: Path) -> bool:
        """Return False for paths outside the root, ignored names and excluded folders (no I/O)."""
        path = Path(os.path.abspath(path))
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return False
        if any(self._ignored_name(part) for part in rel.parts):
            return False
        return not any(path == ex or ex in path.parents for ex in self.exclude)
