"""When the daemon pays for summaries: the refresh window, the idle trigger and the LLM budget.

An update marks the summaries its changes touched stale (``TreeUpdater.apply(defer=True)``) and a
refresh regenerates all of them at once (:meth:`~ingestor.tree.adrap.TreeUpdater.refresh`), so a
summary touched by ten changes inside one window is bought once. :class:`SummarySchedule` decides
when that refresh is due: once the oldest stale summary is ``window`` seconds old, sooner once the
folder has been quiet for ``idle`` seconds, on demand (``adrap refresh``, ``POST /refresh``), and
never while the :class:`TokenBudget` is spent (leaves stay current; summaries wait until it
refills). ``window`` 0 regenerates at once, as an update did before (no stale summaries), unless
the budget is spent.

Every time is a ``time.monotonic()`` reading passed in, so tests drive the clock.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["HOUR", "SummarySchedule", "TokenBudget", "oldest_stale", "stale_age"]


def oldest_stale(state: Any) -> float | None:
    """When the tree's oldest stale summary went stale (None: none is): a wall-clock time kept in
    the state, so a restart does not reset the window. Read it in the writer's thread."""
    stamps = list(state.stale.values())
    return min(stamps) if stamps else None


def stale_age(oldest: float | None) -> float | None:
    """Seconds since ``oldest`` (:func:`oldest_stale`; None: nothing is stale)."""
    return None if oldest is None else max(0.0, time.time() - oldest)


HOUR = 3600.0
DAY = 24 * HOUR


@dataclass
class TokenBudget:
    """Caps on the summariser's tokens per hour and per day (None: no cap), over sliding windows.

    Tokens are the summariser's input (the children's texts: what a paid LLM bills most), counted
    by the tree for every summary paid for, whatever the backend reports.
    """

    per_hour: int | None = None
    per_day: int | None = None
    spent_log: deque[tuple[float, int]] = field(default_factory=deque)
    exhausted_since: float | None = None

    def spend(self, tokens: int, now: float) -> None:
        """Record ``tokens`` spent at ``now``."""
        if tokens > 0:
            self.spent_log.append((now, tokens))

    def spent(self, now: float, over: float) -> int:
        """Tokens spent in the ``over`` seconds up to ``now``."""
        while self.spent_log and self.spent_log[0][0] <= now - DAY:
            self.spent_log.popleft()
        return sum(t for at, t in self.spent_log if at > now - over)

    def allows(self, now: float) -> bool:
        """Whether summaries may be paid for now; logs once when the budget runs out and once
        when it refills."""
        over = [
            f"{spent:,} of {cap:,} tokens this {name}"
            for cap, span, name in ((self.per_hour, HOUR, "hour"), (self.per_day, DAY, "day"))
            if cap is not None and (spent := self.spent(now, span)) >= cap
        ]
        if over and self.exhausted_since is None:
            self.exhausted_since = now
            log.warning(
                "summary budget spent (%s): leaves stay current, summaries wait (stale) until it "
                "refills; raise ADRAP_SUMMARY__MAX_TOKENS_PER_HOUR/_PER_DAY to pay more",
                "; ".join(over),
            )
        elif not over and self.exhausted_since is not None:
            self.exhausted_since = None
            log.info("summary budget refilled: stale summaries are regenerated")
        return not over

    def status(self, now: float) -> dict[str, Any]:
        return {
            "tokens_last_hour": self.spent(now, HOUR),
            "tokens_last_day": self.spent(now, DAY),
            "max_tokens_per_hour": self.per_hour,
            "max_tokens_per_day": self.per_day,
            "exhausted": self.exhausted_since is not None,
        }


@dataclass
class SummarySchedule:
    """Decides when stale summaries are regenerated.

    Args:
        window: a refresh is due once the oldest stale summary is this old (seconds; 0: at once).
        idle: ... or once nothing has changed for this long (seconds; 0: never on idle).
        budget: the LLM budget; a spent budget defers every summary and every refresh.
    """

    window: float = 300.0
    idle: float = 120.0
    budget: TokenBudget = field(default_factory=TokenBudget)
    last_change: float = 0.0
    last_refresh_tokens: int = 0
    requested: bool = False

    def defer(self, now: float) -> bool:
        """Whether an update made now marks its summaries stale instead of paying for them."""
        return self.window > 0 or not self.budget.allows(now)

    def defers_now(self) -> bool:
        """:meth:`defer` at the monotonic clock's now: what the pipeline's updates ask."""
        return self.defer(time.monotonic())

    def changed(self, now: float) -> None:
        """An update was applied at ``now``."""
        self.last_change = now

    def request(self) -> None:
        """Refresh at the next chance, whatever the window (``adrap refresh``)."""
        self.requested = True

    def due(self, now: float, stale_age: float | None) -> bool:
        """Whether a refresh should run now; ``stale_age``: seconds since the oldest stale
        summary went stale (None: none is)."""
        if stale_age is None:
            self.requested = False
            return False
        if not self.budget.allows(now):
            return False
        if self.requested or stale_age >= self.window:
            return True
        return self.idle > 0 and now - self.last_change >= self.idle

    def status(self, now: float, stale: int, oldest: float | None) -> dict[str, Any]:
        """The ``/status`` block: ``stale`` summaries, the ``oldest`` one's stamp
        (:func:`oldest_stale`), when the next refresh comes, the budget."""
        age = stale_age(oldest)
        return {
            "stale": stale,
            "oldest_stale_seconds": None if age is None else round(age, 1),
            "refresh_window_seconds": self.window,
            "refresh_idle_seconds": self.idle,
            "next_refresh_in_seconds": None
            if age is None
            else round(max(0.0, self.window - age), 1),
            "last_refresh_tokens": self.last_refresh_tokens,
        } | self.budget.status(now)

    def refreshed(self, tokens: int, now: float) -> None:
        """A refresh paid ``tokens`` at ``now``."""
        self.requested = False
        self.last_refresh_tokens = tokens
        self.budget.spend(tokens, now)
