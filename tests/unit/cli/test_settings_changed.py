"""Settings changed on a built tree, as `adrap` sees them. A file skipped under some read settings
is read again once they change: `huge.txt`, too large for ADRAP_READ__MAX_FILE_BYTES, stayed
skipped after the limit was raised ("retried when it changes": the file had not). And `adrap
status` says when the tree's summaries were written by another summariser or at another length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main


def _status() -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["status", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_a_raised_size_limit_reads_the_file_it_skipped(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _status()["documents"] == 2
    again = CliRunner().invoke(main, ["add", str(built)])
    assert again.exit_code == 0, again.output
    assert _status()["documents"] == 2, "the same settings: still skipped, not read again"
    monkeypatch.setenv("ADRAP_READ__MAX_FILE_BYTES", "100000")
    raised = CliRunner().invoke(main, ["add", str(built)])
    assert raised.exit_code == 0, raised.output
    status = _status()
    assert status["documents"] == 3
    assert status["unread"]["skipped"] == 0


def test_status_says_when_the_tree_s_summaries_were_written_otherwise(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _status()["summarizer"] == "extractive"
    monkeypatch.setenv("ADRAP_SUMMARY__MAX_TOKENS", "60")
    line = _status()["summarizer"]
    assert line.startswith("extractive, 60 tokens (the tree's summaries were written by")
    assert "150 tokens" in line
    assert "adrap refresh --rewrite" in line
