"""What the daemon does with a failed batch: classify the failure, quarantine what cannot succeed.

- **transient** (connection, timeout, 429, 5xx, store or state dir unavailable, a refused key,
  a read cut short by a stop): the batch is retried with backoff; nothing is lost.
- **permanent** (the LLM rejects the input: 400 "context too long", 413, 422, a content filter):
  retrying the same input fails again. A batch of several paths is split to find the path; a single
  path is *quarantined*.
- **unexpected** (any other exception, e.g. a parser bug): handled like a permanent one.

The quarantine is a small JSON file in the state dir (``quarantine.json``, written atomically), so
it survives restarts. A quarantined file is tried again when its size or mtime changes, or when a
user asks (``adrap retry``, ``POST /retry``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ingestor.errors import SummarizationError, TreeError
from ingestor.ledger import JsonLedger
from ingestor.pipeline.budget import ReadStopped
from models_store import ModelStoreError
from retriever import EmbeddingError, StoreError

log = logging.getLogger(__name__)

QUARANTINE_FILE = "quarantine.json"

Kind = Literal["transient", "permanent", "unexpected"]

#: HTTP statuses of an LLM endpoint that reject this input for good (retrying cannot help).
PERMANENT_STATUS = frozenset({400, 413, 422})
#: ReadStopped: the daemon stopping cut a read short; the file is read at the next start.
_TRANSIENT = (
    StoreError,
    EmbeddingError,
    TreeError,
    ModelStoreError,
    OSError,
    TimeoutError,
    ReadStopped,
)


def classify(exc: BaseException) -> Kind:
    """Return how the daemon treats ``exc``: transient, permanent (for the input) or unexpected."""
    if isinstance(exc, SummarizationError):
        status = _status_of(exc)
        return "permanent" if status in PERMANENT_STATUS else "transient"
    if isinstance(exc, _TRANSIENT):
        return "transient"
    return "unexpected"


def _status_of(exc: BaseException) -> int | None:
    """Return the HTTP status code of the first cause in ``exc``'s chain that carries one."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        status = getattr(cur, "status_code", None)
        if isinstance(status, int):
            return status
        cur = cur.__cause__ or cur.__context__
    return None


@dataclass(frozen=True)
class Quarantined:
    """One quarantined file: why, and the (size, mtime_ns) it had (a change releases it)."""

    reason: str
    size: int
    mtime_ns: int
    at: float


class Quarantine:
    """Sources that failed permanently, keyed by their path relative to the root.

    Args:
        path: the JSON file (``<state_dir>/quarantine.json``); None keeps it in memory only.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._ledger = _ledger(path)
        self._items: dict[str, Quarantined] = self._ledger.load()

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> dict[str, Quarantined]:
        """Return a copy of the entries."""
        with self._lock:
            return dict(self._items)

    def add(self, source: str, file: Path, reason: str) -> None:
        """Quarantine ``source`` (the file ``file``) for ``reason``."""
        try:
            st = file.stat()
            size, mtime_ns = st.st_size, st.st_mtime_ns
        except OSError:
            size, mtime_ns = -1, -1
        with self._lock:
            self._items[source] = Quarantined(reason[:500], size, mtime_ns, time.time())
            self._save()
        log.warning(
            "quarantined %s: %s; it is retried when the file changes or with `adrap retry %s`",
            source,
            reason[:200],
            source,
        )

    def holds(self, source: str, file: Path) -> bool:
        """Return True if ``source`` is quarantined and unchanged; a changed file is released."""
        with self._lock:
            entry = self._items.get(source)
            if entry is None:
                return False
            try:
                st = file.stat()
                now = (st.st_size, st.st_mtime_ns)
            except OSError:
                now = (-1, -1)
            if now == (entry.size, entry.mtime_ns):
                return True
            del self._items[source]
            self._save()
        log.info("%s changed since it was quarantined; trying it again", source)
        return False

    def release(self, prefix: str | None = None) -> list[str]:
        """Remove every entry (or those equal to / under ``prefix``); return the released sources."""
        with self._lock:
            if prefix is None:
                out = list(self._items)
            else:
                p = prefix.strip("/")
                out = [s for s in self._items if s == p or s.startswith(p + "/")]
            for s in out:
                del self._items[s]
            if out:
                self._save()
        return out

    def _save(self) -> None:
        self._ledger.save(self._items)


def _ledger(path: Path | None) -> JsonLedger[Quarantined]:
    return JsonLedger(path, Quarantined, what="quarantine file")


def read_quarantine(path: Path) -> dict[str, Quarantined]:
    """Load a quarantine file; a missing or unreadable one is empty (logged)."""
    return _ledger(path).load()
