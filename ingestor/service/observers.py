"""watchdog's observers, bounded to the folders the listing lists (:data:`MAX_DEPTH` below the root).

Both of watchdog's observers walk a new folder recursively: the native one (inotify) adds a watch
to every folder under a created or moved-in folder with ``os.walk`` (recursive on Python 3.11), the
polling one snapshots the tree with a recursive generator. A ``mkdir -p`` 1,000 deep, which anyone
who may write to the share can make, ran both out of Python's stack: the native observer's reading
thread died, and from then on the daemon saw no change of the share (a restart walked the chain
again at start-up). Here the native observer's watch group walks without recursion and watches no
folder deeper than the listing lists, and the polling one lists no folder below that depth: what
is deeper is never read (:func:`~ingestor.read.listing.iter_files` skips it, saying why), so its
events would be judged away anyway.

The native observer's watch group is watchdog's own with its two walks replaced (``watchdog`` is
pinned by the lock; ``tests/unit/service/test_deep_watch.py`` runs a real chain through it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from watchdog.observers import Observer
from watchdog.observers.api import DEFAULT_OBSERVER_TIMEOUT, BaseObserver
from watchdog.observers.polling import PollingObserverVFS

from ingestor.read.listing import MAX_DEPTH

try:  # Linux: inotify
    from watchdog.observers.inotify import InotifyEmitter, InotifyObserver, InotifyWatchGroup
    from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent, Mask
    from watchdog.observers.inotify_c import InotifyFD as _InotifyFD
except ImportError:  # pragma: no cover (other systems: watchdog's own observer)
    InotifyWatchGroup = None  # type: ignore[assignment,misc]

__all__ = ["bounded_observer", "depth_below"]


def depth_below(path: bytes | str, root: bytes | str) -> int:
    """How many folders ``path`` is below ``root`` (0: the root itself; paths as given)."""
    rel = os.path.relpath(os.fsdecode(path), os.fsdecode(root))
    return 0 if rel == os.curdir else len(Path(rel).parts)


def walk_down(top: bytes, root: bytes) -> Iterator[tuple[bytes, list[bytes], list[bytes]]]:
    """``os.walk(top)`` top-down without recursion, links not followed (a link is a file here),
    no folder more than :data:`MAX_DEPTH` below ``root`` listed."""
    todo = [(top, depth_below(top, root))]
    while todo:
        folder, depth = todo.pop()
        if depth > MAX_DEPTH:
            continue
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        dirs: list[bytes] = []
        files: list[bytes] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(os.fsencode(entry.name))
        yield folder, dirs, files
        todo.extend((os.path.join(folder, d), depth + 1) for d in reversed(dirs))


if InotifyWatchGroup is not None:

    class _BoundedGroup(InotifyWatchGroup):
        """watchdog's watch group, its two walks bounded and without recursion."""

        def __post_init__(self) -> None:
            self._inodes: dict[bytes, int] = {}  # each watched folder's, when it was watched
            super().__post_init__()  # watches the root and what is under it

        def _add_all_callbacks(self, path: bytes) -> None:
            if depth_below(path, self.path) > MAX_DEPTH:
                return
            self._add_callback(path)
            if self.is_recursive and os.path.isdir(path):
                for folder, dirs, _ in walk_down(path, self.path):
                    if depth_below(folder, self.path) < MAX_DEPTH:  # its folders are listed
                        for name in dirs:
                            self._add_callback(os.path.join(folder, name))

        def _add_callback(self, path: bytes) -> None:
            # A folder made while its parent is walked is reached twice (by the walk, then by its
            # own event): watching it again only makes watchdog warn that it overwrites its
            # callback (a RuntimeWarning per folder of a `mkdir -p`; where warnings are errors,
            # that ended the observer's thread). The same folder, still watched, is skipped.
            known = self._active_callbacks_by_path.get(path)
            watch = None if known is None else self._inotify_fd._watch_for_wd.get(known)
            try:
                inode = os.stat(path).st_ino
            except OSError:
                inode = None
            if (
                watch is not None
                and self._id in watch.callbacks
                and self._inodes.get(path) == inode
            ):
                return
            super()._add_callback(path)
            if inode is not None:
                self._inodes[path] = inode

        def _recursive_simulate(self, src_path: bytes) -> list[Any]:
            events = []
            for folder, dirs, files in walk_down(src_path, self.path):
                wd = self._active_callbacks_by_path.get(folder)
                if wd is None:  # not watched (yet): its own events report it
                    continue
                made_dir = Mask(InotifyConstants.IN_CREATE | InotifyConstants.IN_ISDIR)
                made = Mask(InotifyConstants.IN_CREATE)
                events += [InotifyEvent(wd, made_dir, 0, name) for name in dirs]
                events += [InotifyEvent(wd, made, 0, name) for name in files]
            return events

    class _BoundedEmitter(InotifyEmitter):
        def on_thread_start(self) -> None:
            self._inotify = _BoundedGroup(
                self._inotify_fd,
                os.fsencode(self.watch.path),
                is_recursive=self.watch.is_recursive,
                event_mask=self.get_event_mask_from_filter(),
                follow_symlink=self.watch.follow_symlink,
            )

    class _BoundedObserver(InotifyObserver):
        def __init__(self, *, timeout: float = DEFAULT_OBSERVER_TIMEOUT) -> None:
            self._inotify_fd = _InotifyFD()
            self._inotify_fd.start()
            BaseObserver.__init__(
                self, _BoundedEmitter, timeout=timeout, inotify_fd=self._inotify_fd
            )


def bounded_observer(
    root: Path | None,
    *,
    polling: bool,
    interval: float,
    stat: Callable[[str], os.stat_result],
) -> BaseObserver:
    """The native observer (inotify where there is one: no folder watched more than
    :data:`MAX_DEPTH` below the folder it watches), or the polling one with ``stat`` (none
    listed that deep below ``root``; unbounded without one)."""
    if polling:
        if root is None:
            return PollingObserverVFS(stat, os.scandir, polling_interval=interval)
        top = os.path.abspath(root)

        def listdir(path: str | None) -> Iterator[os.DirEntry[Any]]:
            with os.scandir(path) as it:
                entries = list(it)
            deep = path is not None and depth_below(path, top) >= MAX_DEPTH
            return iter([e for e in entries if not (deep and e.is_dir(follow_symlinks=False))])

        return PollingObserverVFS(stat, listdir, polling_interval=interval)
    if InotifyWatchGroup is None:  # pragma: no cover
        return Observer()
    return _BoundedObserver()
