"""The refresh schedule and the LLM budget (issue 34), on a clock the test drives."""

from __future__ import annotations

import logging

import pytest

from ingestor.service.summary_schedule import HOUR, SummarySchedule, TokenBudget


def test_a_refresh_waits_for_the_window_then_comes_due() -> None:
    s = SummarySchedule(window=300, idle=0)
    s.changed(0)
    assert s.defer(0)
    assert not s.due(100, stale_age=100)
    assert s.due(300, stale_age=300)
    assert not s.due(300, stale_age=None), "nothing stale: nothing to do"


def test_a_quiet_folder_refreshes_before_the_window() -> None:
    s = SummarySchedule(window=300, idle=60)
    s.changed(100)
    assert not s.due(150, stale_age=60)
    assert s.due(160, stale_age=70)


def test_a_request_refreshes_at_once_and_is_then_forgotten() -> None:
    s = SummarySchedule(window=300, idle=0)
    s.request()
    assert s.due(1, stale_age=1)
    s.refreshed(10, 1)
    assert not s.due(2, stale_age=1)


def test_window_zero_pays_at_once_until_the_budget_is_spent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = SummarySchedule(window=0, idle=0, budget=TokenBudget(per_hour=1000))
    assert not s.defer(0)
    s.budget.spend(1000, 10)
    with caplog.at_level(logging.WARNING):
        assert s.defer(20), "a spent budget defers every summary"
        assert not s.due(30, stale_age=10), "and every refresh"
        assert s.defer(40)
    assert len([r for r in caplog.records if "budget spent" in r.message]) == 1, "said once"
    assert not s.defer(10 + HOUR), "refilled after an hour"
    assert s.due(10 + HOUR, stale_age=HOUR - 10)


def test_the_daily_cap_counts_a_day() -> None:
    b = TokenBudget(per_day=500)
    b.spend(300, 0)
    b.spend(300, 5 * HOUR)
    assert not b.allows(6 * HOUR)
    assert b.allows(24 * HOUR + 1), "the first spend left the day"
    assert b.status(24 * HOUR + 1)["tokens_last_day"] == 300
