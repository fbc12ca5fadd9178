"""The reader process's side of :mod:`ingestor.pipeline.budget`: read and chunk what it is sent.

It takes ``(index, task)`` messages, one file each, and answers ``("start", index, when)`` as
it begins one, ``("took", index, seconds)`` as it ends it (its own reading time: the parent may
take the answer much later), then ``("done", index, read_then(task))``, ``("memory", index, None)`` (the file
needed more than its memory budget: it then exits, a fresh reader takes over) or
``("error", index, exception)`` (a bug, raised in the parent). ``None`` asks it to exit.
"""

from __future__ import annotations

import logging
import pickle
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from ingestor.cluster.parallel import init_worker

__all__ = ["address_space", "limit_memory", "serve"]

log = logging.getLogger(__name__)


def serve(conn: Connection, parent: int, memory_bytes: int) -> None:
    """Run a reader: set it up, cap its memory, then read the files sent on ``conn``."""
    init_worker(parent)
    # What every file needs, imported and loaded before the memory is capped.
    import ingestor.pipeline.chunker  # noqa: F401  (a task's chunker is unpickled from here)
    from ingestor.read.documents import read_then
    from ingestor.read.tokens import default_tokenizer

    default_tokenizer()
    limit_memory(memory_bytes)
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent went
            return
        if message is None:
            return
        index, task = message
        started = time.monotonic()
        conn.send(("start", index, started))
        try:
            answer: tuple[str, int, Any] = ("done", index, read_then(task))
            if _out_of_memory(answer[2][1]):
                answer = ("memory", index, None)
        except MemoryError:
            answer = ("memory", index, None)
        except Exception as exc:
            answer = ("error", index, _portable(exc))
        conn.send(("took", index, time.monotonic() - started))
        try:
            conn.send(answer)
        except MemoryError:  # pickling the leaves of a huge text needed more
            answer = ("memory", index, None)
            conn.send(answer)
        if answer[0] == "memory":
            return  # what failed may have left this process in any state: a fresh one goes on


def _out_of_memory(item: object) -> bool:
    """True if ``item`` is a SourceError that a converter raised for a MemoryError."""
    seen: set[int] = set()
    cur = item if isinstance(item, BaseException) else None
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, MemoryError):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _portable(exc: Exception) -> Exception:
    """``exc`` with this process's traceback as a note, or a RuntimeError saying it if it
    cannot be pickled."""
    exc.add_note("in a reader process:\n" + traceback.format_exc().rstrip())
    try:
        pickle.dumps(exc)
    except Exception:  # any pickling failure: the text is what matters
        plain = RuntimeError(f"{type(exc).__name__}: {exc}")
        for note in getattr(exc, "__notes__", []):
            plain.add_note(note)
        return plain
    return exc


def address_space() -> int | None:
    """This process's virtual memory size in bytes (Linux), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    import resource

    return pages * resource.getpagesize()


def limit_memory(extra: int) -> None:
    """Let this process's address space grow by at most ``extra`` bytes from now on."""
    import resource

    base = address_space()
    if base is None:
        log.warning(
            "cannot read this process's memory size here (no /proc): files are read without a "
            "memory limit; ADRAP_READ__WORKER_SECONDS still applies"
        )
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = base + extra if hard == resource.RLIM_INFINITY else min(base + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
