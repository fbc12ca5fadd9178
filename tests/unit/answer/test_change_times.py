"""The times ``adrap changes --since``, ``GET /changes?since=`` and the MCP tool take: "what is new
since Monday?" asked as ``--since monday`` (it was refused: only durations, ISO dates and epoch
seconds were times)."""

from __future__ import annotations

import datetime as dt

import pytest

from ingestor.answer.changes import parse_time

#: A Wednesday afternoon, local time.
NOW = dt.datetime(2026, 11, 25, 15, 30).timestamp()


def _local(value: str) -> dt.datetime:
    return dt.datetime.fromtimestamp(parse_time(value, NOW))


@pytest.mark.parametrize(
    ("value", "day"),
    [
        ("today", 25),
        ("Yesterday", 24),
        ("monday", 23),
        ("Mon", 23),
        ("wednesday", 25),  # today is one: from this midnight
        ("thursday", 19),  # the last one went by six days ago
        ("sun", 22),
        (" Tuesday ", 24),
    ],
)
def test_a_day_by_its_name_is_its_most_recent_midnight(value: str, day: int) -> None:
    assert _local(value) == dt.datetime(2026, 11, day)


def test_the_other_forms_still_parse() -> None:
    assert parse_time("2d", NOW) == NOW - 2 * 86400
    assert _local("2026-11-20T09:00") == dt.datetime(2026, 11, 20, 9)
    assert parse_time("1795000000", NOW) == 1795000000.0


@pytest.mark.parametrize("value", ["mo", "last tuesday", "tomorrow", "mondays"])
def test_what_is_no_day_is_refused_with_the_forms(value: str) -> None:
    with pytest.raises(ValueError, match=r"a day \(today, yesterday, monday\)"):
        parse_time(value, NOW)
