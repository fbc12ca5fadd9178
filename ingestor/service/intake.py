"""What the watch worker takes from its queue, and when: bursts, settling, quarantine.

A :class:`Burst` gathers the paths of queued :class:`~ingestor.service.events.Change` s and knows
whether every wanted one is complete (closed after a write, or the destination of a move): such
a burst may end after the close grace instead of the full debounce, which is what brings a saved
file to searchable in about the embedding time. :class:`Settling` holds files whose size and mtime
still move (polling mode: a file being copied onto a share is not read half), and
:func:`not_quarantined` drops the paths that failed for good until they change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ingestor.service.events import Change
from ingestor.service.failures import Quarantine

log = logging.getLogger(__name__)

__all__ = ["Burst", "Settling", "not_quarantined"]


class Burst:
    """The paths of one burst of events, and which of them a writer may still hold open.

    Args:
        named: whether a path's name is watched at all (ignored names, such as an editor's swap
            file that stays open while it runs, must not hold a burst back).
    """

    def __init__(self, named: Callable[[Path], bool]) -> None:
        self.named = named
        self.paths: set[Path] = set()
        self.open: set[Path] = set()  # watched paths whose last event left them incomplete

    def add(self, change: Change) -> bool:
        """Take one event; return False if it adds nothing (a close with no change in the burst)."""
        path = change.path
        if not change.changed and path not in self.paths:
            return False
        self.paths.add(path)
        if change.complete:
            self.open.discard(path)
        elif self.named(path):
            self.open.add(path)
        return True

    def join(self, paths: Iterable[Path]) -> None:
        """Take paths that already waited (retries, settled files): complete by now."""
        self.paths.update(paths)

    @property
    def complete(self) -> bool:
        """True if no watched path of the burst may still be written to."""
        return not self.open


class Settling:
    """Files held until their (size, mtime) is unchanged across ``settle`` seconds (polling mode).

    Args:
        settle: seconds between the two looks; 0 takes every file at once.
    """

    def __init__(self, settle: float) -> None:
        self.settle = settle
        self.unsettled: dict[Path, tuple[int, int]] = {}  # path -> (size, mtime_ns) last seen
        self.due_at = 0.0

    def __len__(self) -> int:
        return len(self.unsettled)

    def due(self, now: float) -> bool:
        """True if held files wait and their second look is due."""
        return bool(self.unsettled) and now >= self.due_at

    def take(self) -> set[Path]:
        """Return and forget every held file (the worker is stopping)."""
        out = set(self.unsettled)
        self.unsettled = {}
        return out

    def settled(self, paths: list[Path]) -> list[Path]:
        """Return the paths whose (size, mtime) did not change since the last look, or whose
        mtime is already ``settle`` seconds old; hold the rest for another look."""
        if self.settle <= 0:
            return paths
        out = []
        for path in paths:
            try:
                st = path.stat()
            except OSError:
                self.unsettled.pop(path, None)
                out.append(path)  # gone: a deletion needs no settling
                continue
            if not path.is_file():
                out.append(path)
                continue
            now = (st.st_size, st.st_mtime_ns)
            # unchanged since the last look, or not written for `settle` seconds already (a save
            # the poll found late, a copy that kept its old mtime): no second look needed
            if self.unsettled.get(path) == now or time.time() - st.st_mtime >= self.settle:
                self.unsettled.pop(path, None)
                out.append(path)
            else:
                if path not in self.unsettled:
                    log.debug("%s: waiting until its size and mtime are stable", path)
                self.unsettled[path] = now
        if self.unsettled:
            self.due_at = time.monotonic() + self.settle
        return out


def not_quarantined(paths: list[Path], root: Path, quarantine: Quarantine) -> list[Path]:
    """Return the paths the quarantine does not hold (it releases a file once it changed)."""
    out = []
    for path in paths:
        try:
            source = path.relative_to(root).as_posix()
        except ValueError:
            out.append(path)
            continue
        if not quarantine.holds(source, path):
            out.append(path)
    return out
