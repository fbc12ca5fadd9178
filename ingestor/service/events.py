"""watchdog glue: the observer (native or polling) and a handler that only enqueues paths."""

from __future__ import annotations

import fnmatch
import logging
import os
import queue
from collections.abc import Iterable, Sequence
from pathlib import Path

from watchdog.events import (
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

log = logging.getLogger(__name__)

_CHANGES = frozenset(
    {EVENT_TYPE_CREATED, EVENT_TYPE_DELETED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED}
)


def make_observer(*, polling: bool = False, interval: float = 2.0) -> BaseObserver:
    """Return watchdog's native observer, or its polling one (NFS/SMB, Docker bind mounts)."""
    if polling:
        return PollingObserver(timeout=interval)
    return Observer()


class EnqueueHandler(FileSystemEventHandler):
    """Puts the path(s) of every change event on a queue; nothing else (it runs in watchdog's thread).

    Opened/closed/attribute events and directory "modified" events (a child changed, which has
    its own event) carry no content change and are not queued: reading a file must not trigger a
    batch.
    """

    def __init__(self, paths: queue.Queue[Path | None]) -> None:
        self.paths = paths

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _CHANGES:
            return
        if event.is_directory and event.event_type == EVENT_TYPE_MODIFIED:
            return
        self.paths.put(Path(os.fsdecode(event.src_path)))
        if event.event_type == EVENT_TYPE_MOVED:
            self.paths.put(Path(os.fsdecode(event.dest_path)))


class PathFilter:
    """Which paths under ``root`` the watcher takes: not ignored, not excluded, no outward links."""

    def __init__(self, root: Path, ignore: Sequence[str], exclude: Iterable[Path]) -> None:
        self.root = Path(os.path.abspath(root))
        self.real_root = self.root.resolve()
        self.ignore = tuple(ignore)
        self.exclude = [Path(os.path.abspath(p)) for p in exclude]

    def wanted(self, path: Path) -> bool:
        """Return False for paths outside the root, ignored names, excluded folders, outward links."""
        path = Path(os.path.abspath(path))
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return False
        if any(fnmatch.fnmatch(part, pat) for part in rel.parts for pat in self.ignore):
            return False
        if any(path == ex or ex in path.parents for ex in self.exclude):
            return False
        if path.is_symlink():
            try:
                target = path.resolve(strict=False)
            except (OSError, RuntimeError) as exc:
                log.warning(
                    "skipped %s: symlink cannot be resolved (%s); fix or remove it", path, exc
                )
                return False
            if target != self.real_root and self.real_root not in target.parents:
                log.warning(
                    "skipped %s: symlink to %s, outside the watched folder; links are never "
                    "followed out of the root",
                    path,
                    target,
                )
                return False
        return True
