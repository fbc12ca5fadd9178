"""The files the tree could not read, and why: skipped (content) and stale (cannot read *now*).

A real shared folder always holds some files that cannot be read: a format nobody reads, an
empty or corrupt file (**skipped**: retried when the file changes), and files that exist but fail
to read right now, such as a document open in Word on an SMB share (EBUSY, EACCES), a flaky
mount (EIO) or a folder that cannot be listed (**stale**: what was read before is kept, and the
read is retried with backoff). A file whose current version is unusable but that was read before
is stale too: its last readable version stays in the tree until the file changes or goes.

Only a file that is gone is removed from the tree; this ledger is how "cannot read it now" stays
visible instead (``/status``, ``adrap status``, ``/metrics``, the dashboard) and how each skip is
logged once per file version rather than on every rescan. It is a small JSON file in the state
dir (``unread.json``), written atomically when it changed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ingestor.ledger import JsonLedger

log = logging.getLogger(__name__)

__all__ = [
    "UNREAD_FILE",
    "Unread",
    "UnreadFile",
    "content_stale_reason",
    "unread_status",
]

UNREAD_FILE = "unread.json"

Kind = Literal["skipped", "stale"]

#: First retry of a file that cannot be read now, seconds; doubled after each failure.
FIRST_RETRY = 5.0
#: Longest wait between two retries, seconds.
MAX_RETRY = 600.0


@dataclass(frozen=True)
class UnreadFile:
    """One file (or folder, ``source`` ending in ``/``) the tree could not read.

    Attributes:
        kind: ``skipped`` (its content cannot be used; tried again when it changes) or ``stale``
            (it cannot be read now, or its new version cannot be used: what was read before is
            kept).
        reason: the one-line error, naming the file, the reason and the fix.
        since: when it first failed, seconds since the epoch.
        kept: True if the tree still holds an earlier version of it.
        size: size of the version that failed (-1: unknown).
        mtime_ns: modification time of that version (-1: unknown).
        attempts: failed reads so far.
        next_try: when a stale file is read again, seconds since the epoch; 0: only once it changes.
        inode: the inode of that version (-1: unknown): a file replaced by another of the same
            size and mtime (a copy, a rename over it) is another version.
        settings: the read settings it failed under (:attr:`Unread.settings`): with others (a
            larger ``ADRAP_READ__MAX_FILE_BYTES``, OCR on, a longer reader budget) it is read
            again, whatever its version.
    """

    kind: Kind
    reason: str
    since: float
    kept: bool = False
    size: int = -1
    mtime_ns: int = -1
    attempts: int = 1
    next_try: float = 0.0
    inode: int = -1
    settings: str = ""

    def same_version(self, st: os.stat_result | None) -> bool:
        """True if ``st`` is the version that failed (a known size, mtime and inode)."""
        return (
            st is not None
            and self.size >= 0
            and (self.size, self.mtime_ns) == (st.st_size, st.st_mtime_ns)
            and self.inode in (-1, st.st_ino)
        )


class Unread:
    """Skipped and stale files of one tree, keyed by source (folders end in ``/``).

    Args:
        path: the JSON file (``<state_dir>/unread.json``); None keeps it in memory only.
        clock: seconds since the epoch (tests pass their own).
    """

    def __init__(self, path: Path | None = None, *, clock: Any = time.time) -> None:
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        self._ledger = JsonLedger(path, UnreadFile, what="ledger")
        self._items: dict[str, UnreadFile] = self._ledger.load()
        self._unsaved = False
        #: The read settings files are read with now (``Collector``'s, :func:`read_settings`):
        #: an entry recorded under others is not known to fail (:meth:`known`).
        self.settings = ""

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, source: object) -> bool:
        return source in self._items

    def get(self, source: str) -> UnreadFile | None:
        """Return the entry of ``source``, if any."""
        return self._items.get(source)

    def items(self) -> dict[str, UnreadFile]:
        """Return a copy of the entries."""
        with self._lock:
            return dict(self._items)

    def counts(self) -> dict[str, int]:
        """Return ``{"skipped": n, "stale": m}``."""
        out = {"skipped": 0, "stale": 0}
        for entry in self.items().values():
            out[entry.kind] += 1
        return out

    def page(self, kind: Kind, offset: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """Return entries of ``kind`` sorted by source, ``limit`` from ``offset``, as JSON rows."""
        rows = sorted((s, e) for s, e in self.items().items() if e.kind == kind)
        return [
            {"source": s, "reason": e.reason, "since": e.since, "kept": e.kept}
            for s, e in rows[offset : offset + limit]
        ]

    def note(
        self, source: str, kind: Kind, reason: str, st: os.stat_result | None, *, kept: bool
    ) -> bool:
        """Record that ``source`` failed; return True if this is news (log it), False if known.

        A stale file whose failure is an OS error (``st`` unknown or the same version) is retried
        with backoff; a skipped one, or a stale one whose content is the problem, is retried when
        it changes. News is a new source, another kind or reason, or another version of the file.
        """
        now = self.clock()
        size, mtime_ns, inode = (st.st_size, st.st_mtime_ns, st.st_ino) if st else (-1, -1, -1)
        with self._lock:
            old = self._items.get(source)
            retry = kind == "stale" and not _content_problem(reason)
            if old is not None and old.kind == kind and old.reason == reason:
                attempts = old.attempts + 1
                wait = min(MAX_RETRY, FIRST_RETRY * 2 ** min(attempts - 1, 16))
                entry = replace(
                    old,
                    kept=kept,
                    size=size,
                    mtime_ns=mtime_ns,
                    attempts=attempts,
                    next_try=now + wait if retry else 0.0,
                    inode=inode,
                    settings=self.settings,
                )
                news = (old.size, old.mtime_ns, old.inode) != (size, mtime_ns, inode) and not retry
            else:
                since = old.since if old is not None else now
                entry = UnreadFile(
                    kind, reason[:500], since, kept, size, mtime_ns, 1,
                    now + FIRST_RETRY if retry else 0.0, inode, self.settings,
                )  # fmt: skip
                news = True
            self._items[source] = entry
            self._unsaved = True
        return news

    def known(self, source: str, st: os.stat_result | None) -> UnreadFile | None:
        """Return the entry if reading ``source`` again now would only fail again.

        That is: a skipped or content-stale file whose version is unchanged, or a file that cannot
        be read now whose retry is not due yet (a changed version is always read, and so is a
        file that failed under other read settings).
        """
        entry = self._items.get(source)
        if entry is None or entry.settings != self.settings:
            return None
        if entry.next_try:
            if self.clock() < entry.next_try and entry.same_version(st):
                return entry
            return None
        return entry if entry.same_version(st) else None

    def clear(self, source: str) -> None:
        """Forget ``source`` (it was read, or it is gone)."""
        with self._lock:
            if self._items.pop(source, None) is not None:
                self._unsaved = True

    def clear_under(self, prefix: str) -> None:
        """Forget every entry equal to or under the folder ``prefix`` (``""``: all)."""
        with self._lock:
            drop = [s for s in self._items if _under(s, prefix)]
            for s in drop:
                del self._items[s]
            self._unsaved = self._unsaved or bool(drop)

    def clear_unlisted(self, prefix: str, listed: set[str], unlisted: list[str]) -> None:
        """Forget the entries under folder ``prefix`` that its listing no longer backs.

        ``listed``: the files the listing showed; ``unlisted``: the subfolders (``sub/``) it could
        not list, whose entries stay. Anything else under ``prefix`` is gone, or listable again.
        """
        with self._lock:
            drop = [
                s
                for s in self._items
                if (s.startswith(prefix) or s == prefix)
                and s not in listed
                and not s.startswith(tuple(unlisted))
            ]
            for s in drop:
                del self._items[s]
            self._unsaved = self._unsaved or bool(drop)

    def due(self) -> list[str]:
        """Return the stale sources whose retry is due now."""
        now = self.clock()
        return sorted(s for s, e in self.items().items() if e.next_try and e.next_try <= now)

    def next_due(self) -> float | None:
        """Return the earliest retry time, or None if nothing waits for one."""
        times = [e.next_try for e in self.items().values() if e.next_try]
        return min(times) if times else None

    def flush(self) -> None:
        """Write the ledger if it changed (atomically)."""
        with self._lock:
            if not self._unsaved or self.path is None:
                self._unsaved = False
                return
            items = dict(self._items)
            self._unsaved = False
        try:
            self._ledger.save(items)
        except OSError as exc:  # the state dir is on the same disk as the state: logged, retried
            self._unsaved = True
            log.warning(
                "cannot write %s yet (%s); it is written with the next change", self.path, exc
            )


def read_settings(options: object, budget: object = None) -> str:
    """The read settings a failure depends on, as the ledger compares them: the reading options
    (size limit, OCR, text suffixes) and the reader processes' budget, if any."""
    return repr((options, budget))


def unread_status(unread: Unread, *, offset: int = 0, limit: int = 100) -> dict[str, Any]:
    """The ``unread`` part of ``/status`` and ``adrap status --json``: counts and one page each."""
    counts = unread.counts()
    return {
        "skipped": counts["skipped"],
        "stale": counts["stale"],
        "offset": offset,
        "limit": limit,
        "skipped_files": unread.page("skipped", offset, limit),
        "stale_files": unread.page("stale", offset, limit),
    }


def _under(source: str, prefix: str) -> bool:
    if not prefix:
        return True
    p = prefix.rstrip("/")
    return source == p or source == p + "/" or source.startswith(p + "/")


_CONTENT_MARK = "current version cannot be used"


def content_stale_reason(error: str) -> str:
    """The reason shown for a file read before whose new version cannot be used."""
    return f"its {_CONTENT_MARK} ({error}); the last readable version is kept until it changes"


def _content_problem(reason: str) -> bool:
    return _CONTENT_MARK in reason
