"""What the daemon answers (:class:`DaemonApi`, the ``Served`` of its routes): status, queries and
answers, the retry, confirm and refresh actions, and the bookkeeping after each update or refresh
(counted in the metrics, spent from the summary budget). Given the daemon's parts, not the daemon."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingestor.answer.changes import ChangeFeed
from ingestor.pipeline import UpdateReport
from ingestor.pipeline.unread import Unread, unread_status
from ingestor.read.access_classes import UNRESTRICTED, Identity, class_view
from ingestor.read.listing import source_path
from ingestor.service.failures import Quarantine
from ingestor.service.identity import public_status
from ingestor.service.metrics import Metrics
from ingestor.service.share import RootMonitor, ShareGuard
from ingestor.service.summary_schedule import SummarySchedule, oldest_stale, stale_age
from ingestor.tree.repair import RepairParams
from ingestor.tree.state import TreeState

if TYPE_CHECKING:
    from ingestor.answer.service import QueryService
    from ingestor.service.watcher import Watcher

log = logging.getLogger(__name__)

__all__ = ["DaemonApi"]


class DaemonApi:
    """The daemon's answers and actions over its parts.

    Args:
        metrics: the counters and tree snapshot.
        summaries: when stale summaries are regenerated, and the LLM budget.
        queries: answers ``/query`` and ``/ask``.
        root: the watched folder.
        quarantine, guard, root_monitor: the failed files, the share guard, the folder's watch.
        unread: returns the pipeline's ledger of files that could not be read.
        watcher: returns the writer (None while reconciling).
        access_counts: returns the files per access class (the last reading of permissions).
        changes: reads the change log (``/changes``).
        repair: the daemon's partial repairs (``ADRAP_ADRAP__REPAIR_*``), for ``/repair``.
    """

    def __init__(
        self,
        metrics: Metrics,
        summaries: SummarySchedule,
        queries: QueryService,
        *,
        root: Path,
        quarantine: Quarantine,
        guard: ShareGuard,
        root_monitor: RootMonitor,
        unread: Callable[[], Unread],
        watcher: Callable[[], Watcher | None],
        access_counts: Callable[[], dict[str, int]] = dict,
        changes: ChangeFeed | None = None,
        repair: RepairParams | None = None,
        disk: Callable[[], dict[str, Any]] = dict,  # {"disk": {...}}: the embedded store's
    ) -> None:
        self.metrics = metrics
        self.disk = disk
        self.summaries = summaries
        self.queries = queries
        self.root = root
        self.quarantine = quarantine
        self.guard = guard
        self.root_monitor = root_monitor
        self.unread = unread
        self.watcher = watcher
        self.access_counts = access_counts
        self.repair_params = repair
        self.feed = changes if changes is not None else ChangeFeed.over(lambda: None, queries)
        self.registry = metrics.registry(self.pending, self.gauges)

    @property
    def ready(self) -> bool:
        """The first reconciliation is done: queries are answered."""
        return self.metrics.ready

    def share_problem(self) -> str | None:
        """Why the watched folder is not there now (None: it is)."""
        problem = self.root_monitor.status()["problem"]
        return None if problem is None else str(problem)

    def pending(self) -> int:
        """Paths waiting to be applied."""
        w = self.watcher()
        return w.pending() if w else 0

    def status(
        self, *, offset: int = 0, limit: int = 100, caller: Identity = UNRESTRICTED
    ) -> dict[str, Any]:
        """Return the ``/status`` document (``offset``/``limit``: the page of unread files).

        Who asks is in it (``caller``) with the tree's access classes; a caller who is not the
        owner gets the counts, never the names of files (a name can be a secret too)."""
        out = self.metrics.status(self.pending()) | {"root": str(self.root)}
        out["caller"] = caller.to_json()
        out["access"] = self.access_status(caller)
        if not caller.unrestricted:  # how many files could not be read; their names are not
            return public_status(out) | {"unread": self.unread().counts()}
        w = self.watcher()
        if w is not None:
            out["summaries"] = self.summaries.status(time.monotonic(), *self.metrics.stale())
        out["quarantined"] = {
            source: {"reason": q.reason, "since": q.at}
            for source, q in self.quarantine.items().items()
        }
        out["unread"] = unread_status(self.unread(), offset=offset, limit=limit)
        out |= self.disk()
        return out | self.guard.status() | {"watched_folder": self.root_monitor.status()}

    def dashboard_updates(self, caller: Identity = UNRESTRICTED) -> dict[str, Any]:
        """Return ``/dashboard/api/updates``: the ``/status`` document, the last updates and the
        change log's last 20 records of 30 days, as ``caller`` may see them (anyone but the
        owner: no file names, so no updates, and the records of the files they may read)."""
        return self.status(caller=caller) | {
            "updates": self.metrics.recent() if caller.unrestricted else [],
            "changes": self.feed.changes({"since": "30d", "limit": "20"}, caller)["records"],
        }

    def gauges(self) -> dict[str, Any]:
        """The ``/metrics`` gauges the metrics do not hold themselves."""
        g = self.guard.status()
        out = {
            "quarantined": len(self.quarantine),
            "unread": self.unread().counts(),
            "deletions_paused": g["deletions_paused"] is not None
            or g["awaiting_confirmation"] is not None,
            "watched_folder_missing": not self.root_monitor.status()["available"],
        }
        disk = self.disk().get("disk")
        if disk is not None:
            out["disk_free_bytes"] = disk["free_bytes"]
        return out

    def retry(self, path: str | None = None) -> list[str]:
        """Release quarantined files (all, or those equal to / under ``path``) and queue them."""
        released = self.quarantine.release(path)
        w = self.watcher()
        if w is not None:
            w.enqueue(source_path(self.root, s) for s in released)  # names not UTF-8: escaped
        if released:
            log.info("retrying %d quarantined files: %s", len(released), ", ".join(released[:10]))
        return released

    def confirm_deletions(self) -> None:
        """Let a held bulk deletion through, and rescan the root."""
        self.guard.confirm()
        w = self.watcher()
        if w is not None:
            w.enqueue([self.root])

    def access_status(self, caller: Identity) -> dict[str, Any]:
        """The access classes: how many, their files and readers (the owner), and which the
        caller may read (the files' classes as the last reading of permissions found them)."""
        return class_view(self.access_counts(), self.queries.classes, caller)

    def query(self, params: dict[str, str], caller: Identity = UNRESTRICTED) -> dict[str, Any]:
        """Answer ``/query``: the JSON of ``adrap query --json`` (never waits for the writer).

        Raises:
            ValueError: a parameter is missing, invalid or out of bounds.
            SummarizationError: postQFRAP's summariser failed.
        """
        return self.queries.query(params, caller)

    def ask(self, params: dict[str, str], caller: Identity = UNRESTRICTED) -> dict[str, Any]:
        """Answer ``/ask``: the JSON of ``adrap ask --json`` (same errors as :meth:`query`)."""
        return self.queries.ask(params, caller)

    def changes(self, params: dict[str, str], caller: Identity = UNRESTRICTED) -> dict[str, Any]:
        """Answer ``/changes``: the change log as ``caller`` may see it (ValueError: bad value)."""
        return self.feed.changes(params, caller)

    # -- summaries -------------------------------------------------------------------------------

    def applied(self, report: UpdateReport, state: TreeState) -> None:
        """After each update or refresh (the writer, under its lock): count it, spend it."""
        now = time.monotonic()
        if report.refresh:
            self.summaries.refreshed(report.stats.summary_input_tokens, now)
        else:
            self.summaries.changed(now)
            self.summaries.budget.spend(report.stats.summary_input_tokens, now)
        self.metrics.applied(report, state)

    def refresh_due(self, state: TreeState) -> bool:
        """Whether the stale summaries of ``state`` are due now (the summary schedule)."""
        return self.summaries.due(time.monotonic(), stale_age(oldest_stale(state)))

    def refresh(self, rewrite: bool = False) -> dict[str, Any]:
        """Regenerate the stale summaries now (``POST /refresh``, ``adrap refresh``), unless the
        LLM budget is spent; waits for the batch in hand. ``rewrite``: every summary another
        summariser wrote too (``POST /refresh?rewrite=1``, ``adrap refresh --rewrite``).

        Raises:
            ValueError: the daemon is still reconciling.
        """
        w = self.watcher()
        if w is None:
            raise ValueError("the daemon is still reconciling; retry shortly")
        self.summaries.request()
        if rewrite:  # due whatever is stale now (it marks its own), within the budget
            report = w.refresh(
                lambda _: self.summaries.budget.allows(time.monotonic()), rewrite=True
            )
        else:
            report = w.refresh(self.refresh_due)
        return {
            "refreshed": report is not None,
            "summary": None if report is None else report.summary(),
            "summaries": self.summaries.status(time.monotonic(), *self.metrics.stale()),
        }

    def repair_now(self, every: bool = False) -> dict[str, Any]:
        """Repair the most drifted subtree now (``every``: all the budget allows) under the
        writer's lock, between batches (``POST /repair``, ``adrap repair``).

        Raises:
            ValueError: the daemon is still reconciling, repairs are off, or the repair failed
                (the tree stays as last committed).
        """
        w = self.watcher()
        if w is None:
            raise ValueError("the daemon is still reconciling; retry shortly")
        params = self.repair_params
        if params is None or params.tokens_per_hour <= 0:
            raise ValueError(
                "ADRAP_ADRAP__REPAIR_TOKENS_PER_HOUR is 0 for this daemon: repairs are off; "
                "restart it with a budget (e.g. 50000) to repair drifted subtrees"
            )
        run = w.repair(params, limit=None if every else 1)
        if run is None:
            raise ValueError("the repair failed (see the daemon's log); the tree is unchanged")
        return {"repaired": len(run.done), "due": run.due, "tokens": run.tokens,
                "summary": run.summary()}  # fmt: skip
