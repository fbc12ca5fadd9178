"""A small JSON file of entries keyed by source path, kept in the state dir.

``unread.json`` (:mod:`ingestor.pipeline.unread`) and ``quarantine.json``
(:mod:`ingestor.service.failures`) are both one JSON object ``{source: {field: value}}``, each
value a frozen dataclass's fields. :class:`JsonLedger` owns that file: its path, loading it (a
missing file is empty; an unreadable or corrupt one is logged and empty, so a damaged ledger never
stops the daemon: it only forgets what it noted) and writing it atomically (a temp file beside it,
fsynced, renamed over it: mode 0600, never torn). It imports nothing of adrap, so every layer may
use it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger(__name__)

__all__ = ["JsonLedger", "write_json_atomic"]

E = TypeVar("E", bound="DataclassInstance")


class JsonLedger(Generic[E]):
    """The JSON file of a ledger whose entries are ``entry`` dataclasses keyed by source.

    Args:
        path: the file (``<state_dir>/<name>.json``); None keeps the ledger in memory only (loads
            empty, saves nothing).
        entry: the entries' dataclass, built from each value's fields.
        what: what the file is called in the log (``ignored the unreadable <what> <path>``).
    """

    def __init__(self, path: Path | None, entry: type[E], *, what: str = "ledger") -> None:
        self.path = path
        self.entry = entry
        self.what = what

    def load(self) -> dict[str, E]:
        """Return the entries; a missing file is empty, an unreadable one empty too (logged)."""
        if self.path is None:
            return {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return {k: self.entry(**v) for k, v in raw.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as exc:  # not a JSON object
            log.warning("ignored the unreadable %s %s (%s)", self.what, self.path, exc)
            return {}

    def save(self, items: Mapping[str, E]) -> None:
        """Write ``items`` sorted by source, atomically; an OSError is the caller's to handle."""
        if self.path is None:
            return
        write_json_atomic(self.path, {k: asdict(items[k]) for k in sorted(items)})


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file + fsync + rename; mode 0600)."""
    text = json.dumps(data, indent=1)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
