"""What a folder's watcher is given: when it takes a burst, retries and yields (:class:`Timing`),
and what it tells its owner (:class:`Hooks`), both read by :mod:`ingestor.service.watcher`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingestor.config import WatchSettings, default_of

if TYPE_CHECKING:
    from ingestor.pipeline import UpdateReport
    from ingestor.service.clock import Clock
    from ingestor.tree.state import TreeState

__all__ = ["Hooks", "Timing"]


@dataclass(frozen=True, slots=True)
class Timing:
    """When the worker takes a burst, how it retries, yields the CPU and keeps memory.

    Attributes:
        debounce: quiet seconds that end a burst.
        close_grace: quiet seconds that end a burst whose every path is complete (closed after
            a write, or moved into place); None, or any value >= ``debounce``, always waits
            ``debounce``. Ignored when ``settle`` > 0 (polling reports no closes).
        max_wait: longest a burst is coalesced before it is applied anyway (default 30 times
            debounce, at least 5 s), so a folder that never goes quiet is still indexed.
        settle: seconds a file's (size, mtime) must stay unchanged before it is read (polling
            mode: a file still being copied onto a share is not indexed half); 0 reads at once.
        max_backoff: cap of the retry delay after a failed batch, seconds.
        idle_after: quiet seconds before the idle hook runs (and at most that often after).
        nice: added to the worker thread's nice value (Linux), so that queries keep their CPU
            while it embeds and clusters; 0 keeps the normal priority.
        max_held_rows: past this many rows of the tree's state held in memory after a batch,
            they are dropped and read again when needed (:func:`~ingestor.tree.persist.shed_rows`);
            None holds them all.
        clock: reads the time and waits for changes (None: the real clocks).
    """

    debounce: float = default_of(WatchSettings, "debounce_seconds")
    close_grace: float | None = default_of(WatchSettings, "close_grace_seconds")
    max_wait: float | None = None
    settle: float = 0.0
    max_backoff: float = default_of(WatchSettings, "max_backoff_seconds")
    idle_after: float = 10.0
    nice: int = 0
    max_held_rows: int | None = None
    clock: Clock | None = None

    @classmethod
    def of(cls, watch: WatchSettings, *, polling: bool) -> Timing:
        """Return the timing of the watch settings (``polling``: files settle over a poll)."""
        return cls(
            debounce=watch.debounce_seconds,
            close_grace=watch.close_grace_seconds,
            settle=watch.poll_interval if polling else 0.0,
            max_backoff=watch.max_backoff_seconds,
            nice=watch.writer_nice,
            max_held_rows=watch.max_held_rows,
        )


@dataclass(frozen=True, slots=True)
class Hooks:
    """What the worker tells its owner (the daemon), each called in the worker's thread.

    Attributes:
        on_applied: after each applied batch, under the writer's lock.
        on_error: with the exception class name after each failed batch.
        on_idle: maintenance after ``Timing.idle_after`` quiet seconds (the daemon builds the
            embedded store's index there, never inside an update).
        room: why no update may write now (too little free disk space), or None; a batch then
            waits, unread, and is looked at again every :data:`ROOM_RETRY` seconds.
        step: one step of work that runs between batches while it says more remains (a change
            of embedding model copying the tree:
            :meth:`~ingestor.tree.model_change.ModelChange.step`), under the writer's lock,
            with the committed state; once it says none remains, the state is opened again.
    """

    on_applied: Callable[[UpdateReport, TreeState], None] | None = None
    on_error: Callable[[str], None] | None = None
    on_idle: Callable[[], None] | None = None
    room: Callable[[], str | None] | None = None
    step: Callable[[TreeState], bool] | None = None
