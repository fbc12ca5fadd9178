"""What the watch worker takes from its queue, and when: bursts, settling, redoes, quarantine.

A :class:`Burst` gathers the paths of queued :class:`~ingestor.service.events.Change` s and knows
whether every wanted one is complete (closed after a write, or the destination of a move): such
a burst may end after the close grace instead of the full debounce, which is what brings a saved
file to searchable in about the embedding time. :class:`Settling` holds files whose size and mtime
still move (polling mode: a file being copied onto a share is not read half), :class:`Redo`
holds the paths of a failed batch until they are applied again (after a backoff, or in halves
that isolate the offending path), and :func:`not_quarantined` drops the paths that failed for
good until they change. Time is read from the worker's :class:`~ingestor.service.clock.Clock`.
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from ingestor.read.listing import iter_files, source_text
from ingestor.service.clock import Clock
from ingestor.service.events import Change, PathFilter
from ingestor.service.failures import Quarantine

log = logging.getLogger(__name__)

__all__ = ["Burst", "Redo", "Settling", "not_quarantined"]


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
        clock: the worker's clock.
    """

    def __init__(self, settle: float, clock: Clock) -> None:
        self.settle = settle
        self.clock = clock
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
            if not stat.S_ISREG(st.st_mode):
                out.append(path)
                continue
            now = (st.st_size, st.st_mtime_ns)
            # unchanged since the last look, or not written for `settle` seconds already (a save
            # the poll found late, a copy that kept its old mtime): no second look needed
            if self.unsettled.get(path) == now or self.clock.time() - st.st_mtime >= self.settle:
                self.unsettled.pop(path, None)
                out.append(path)
            else:
                if path not in self.unsettled:
                    log.debug("%s: waiting until its size and mtime are stable", path)
                self.unsettled[path] = now
        if self.unsettled:
            self.due_at = self.clock.monotonic() + self.settle
        return out


class Redo:
    """The paths of failed batches, to be applied again.

    After a transient failure they wait a backoff (doubling from 1 s up to ``max_backoff``);
    after any other, the batch is split and its parts come first, until the offending path is
    alone (the worker quarantines it).

    Args:
        clock: the worker's clock.
        max_backoff: cap of the retry delay, seconds.
    """

    def __init__(self, clock: Clock, max_backoff: float) -> None:
        self.clock = clock
        self.max_backoff = max_backoff
        self.backoff = 0.0
        self.retry: set[Path] = set()
        self.retry_at = 0.0
        self.parts: list[list[Path]] = []  # of failed batches, applied before anything new

    def __len__(self) -> int:
        return len(self.retry) + sum(len(part) for part in self.parts)

    def after(self, paths: list[Path], kind: str, exc: Exception, names: PathFilter) -> Path | None:
        """Plan a failed batch again by the failure's ``kind`` (``classify``'s transient, ...).

        ``names``: the watched root and its ignore patterns (a folder is split into the files
        the one listing gives under it).

        Returns:
            The path to quarantine: a lone file whose failure is not transient; else None.
        """
        what = f"{type(exc).__name__}: {exc}"
        if kind == "transient":
            log.warning(
                "update of %d paths failed (%s); nothing was committed, retrying in %.0f s",
                len(paths),
                what,
                self.later(paths),
            )
        elif len(paths) > 1:
            mid = len(paths) // 2
            self.first([paths[:mid], paths[mid:]])
            log.warning(
                "update of %d paths failed (%s); nothing was committed, splitting the batch to "
                "isolate the offending path",
                len(paths),
                what,
            )
        elif _is_dir(paths[0]):
            # never quarantine a folder (a rescan of the root is one): split it into its files
            listing = iter_files(names.root, ignore=names.ignore, under=paths[0])
            files = [p for p, error in listing if not error]
            if files:
                mid = (len(files) + 1) // 2
                self.first([files[:mid], files[mid:]] if len(files) > 1 else [files])
                log.warning(
                    "update of folder %s failed (%s); trying its %d files one part at a time",
                    paths[0],
                    what,
                    len(files),
                )
        else:
            return paths[0]
        return None

    def later(self, paths: Iterable[Path]) -> float:
        """Retry ``paths`` after the next backoff; return it (seconds)."""
        self.backoff = min(self.max_backoff, max(1.0, self.backoff * 2))
        self.retry.update(paths)
        self.retry_at = self.clock.monotonic() + self.backoff
        return self.backoff

    def soon(self, paths: Iterable[Path], seconds: float) -> None:
        """Retry ``paths`` after ``seconds``, the backoff untouched (a wait that costs nothing
        to check again, such as the disk's free space)."""
        self.retry.update(paths)
        self.retry_at = self.clock.monotonic() + seconds

    def first(self, parts: list[list[Path]]) -> None:
        """Apply ``parts`` (of a failed batch), one batch each, before anything else."""
        self.parts[:0] = parts

    def next_part(self) -> set[Path] | None:
        """Return the next part of a failed batch, or None if none waits."""
        return set(self.parts.pop(0)) if self.parts else None

    def due(self, now: float) -> set[Path]:
        """Return (and forget) the paths to retry if their backoff has elapsed at ``now``."""
        if not self.retry or now < self.retry_at:
            return set()
        out, self.retry = self.retry, set()
        return out

    def landed(self) -> None:
        """A batch landed: the next failure waits the shortest backoff again."""
        self.backoff = 0.0

    def take(self) -> set[Path]:
        """Return and forget every path waiting (the worker is stopping)."""
        out = set(self.retry).union(*self.parts)
        self.retry, self.parts = set(), []
        return out


def _is_dir(path: Path) -> bool:
    """``path.is_dir()`` that says False where the path cannot be looked at now (EACCES)."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except OSError:
        return False


def not_quarantined(paths: list[Path], root: Path, quarantine: Quarantine) -> list[Path]:
    """Return the paths the quarantine does not hold (it releases a file once it changed)."""
    out = []
    for path in paths:
        try:
            source = source_text(path.relative_to(root).as_posix())
        except ValueError:
            out.append(path)
            continue
        if not quarantine.holds(source, path):
            out.append(path)
    return out
