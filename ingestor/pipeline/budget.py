"""What reading one file may cost: the budget of a reader process, and the refusals past it.

Every file is converted to text and chunked by a reader process (:mod:`ingestor.pipeline.readers`),
never by the daemon or the build itself, under a budget (settings ``ADRAP_READ__WORKER_*``, see
docs/formats.md):

- **memory**: the reader's address space may grow by ``memory_bytes`` past what it holds once
  started (``RLIMIT_AS``); an allocation beyond that fails in the reader, which then exits;
- **time**: a file that takes longer than ``seconds`` to read and chunk has its reader killed.

Past either, and when a reader dies while reading a file (a crash in a converter's C library),
the file is refused with a :class:`ReadBudgetError`: a ``SourceError``, so the collector records
it as skipped (at once, before reading on), and it is not read again until it changes (its size,
mtime or inode); the next file goes on in a fresh reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ingestor.errors import IngestError, SourceError
from ingestor.pipeline.unread import Unread
from ingestor.read.listing import source_name

__all__ = [
    "ReadBudget",
    "ReadBudgetError",
    "ReadStopped",
    "died_reason",
    "refused_before",
    "size_text",
]

_MEMORY_SETTING = "ADRAP_READ__WORKER_MEMORY_BYTES"
_SECONDS_SETTING = "ADRAP_READ__WORKER_SECONDS"
#: In every budget refusal's reason (how the ledger's entry is told from other skips).
_UNTIL_CHANGED = "; it is skipped until it changes: "


class ReadBudgetError(SourceError):
    """A file needed more memory or time than a reader may spend on one, or made it die."""


class ReadStopped(IngestError):
    """Reading was cut short because the daemon is stopping; nothing was recorded for the file."""


@dataclass(frozen=True)
class ReadBudget:
    """What one file may cost a reader process (``ADRAP_READ__WORKER_*``).

    Attributes:
        memory_bytes: growth of the reader's address space allowed while it reads one file.
        seconds: wall time allowed to read and chunk one file.
        files: files a reader reads before it is replaced by a fresh one (its start, ~1 s of
            CPU, is paid once per that many files).
    """

    memory_bytes: int = 1 << 30
    seconds: float = 60.0
    files: int = 1000

    def __post_init__(self) -> None:
        if self.memory_bytes < 1 or self.seconds <= 0 or self.files < 1:
            raise ValueError(
                f"a read budget needs memory_bytes >= 1, seconds > 0 and files >= 1; got "
                f"{self.memory_bytes}, {self.seconds} and {self.files}"
            )

    def memory_reason(self, name: str) -> str:
        """Why ``name`` is refused when it needed more memory than the budget."""
        return (
            f"{name!r} needed more than {size_text(self.memory_bytes)} of memory to read"
            f"{_UNTIL_CHANGED}raise {_MEMORY_SETTING} if the file is genuine, else remove it"
        )

    def time_reason(self, name: str) -> str:
        """Why ``name`` is refused when it took longer than the budget."""
        return (
            f"{name!r} took longer than {self.seconds:g} s to read{_UNTIL_CHANGED}raise "
            f"{_SECONDS_SETTING} if the file is genuine, else remove it"
        )


def died_reason(name: str, code: int | None) -> str:
    """Why ``name`` is refused when its reader process died reading it (exit ``code``)."""
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return (
        f"{name!r} made its reader process die ({how}: out of memory, or a crash in a "
        f"converter){_UNTIL_CHANGED}re-save the file, or remove it"
    )


def refused_before(unread: Unread, path: Path, root: Path) -> ReadBudgetError | None:
    """The refusal ``unread`` holds for this version of ``path`` (same size, mtime and inode)
    if it was refused for its budget, else None."""
    source = source_name(path, root)
    try:
        st = path.stat()
    except OSError:
        return None
    entry = unread.known(source, st) if source is not None else None
    if entry is None or entry.kind != "skipped" or _UNTIL_CHANGED not in entry.reason:
        return None
    return ReadBudgetError(entry.reason)


def size_text(n: int) -> str:
    """``n`` bytes as people write it: ``1 GiB``, ``300 MiB``, ``1.5 GiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"
