"""What `adrap build` prints: each file it cannot read once, and log lines that leave the bar whole."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ingestor.cli import main


def test_a_skipped_file_is_printed_once(corpus: Path) -> None:
    result = CliRunner().invoke(main, ["build", str(corpus), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert [x for x in result.output.splitlines() if "huge.txt" in x] == [
        next(x for x in result.output.splitlines() if '"msg": "skipped' in x)
    ], result.output
    assert "1 file not read" in result.output


def test_a_log_line_during_the_progress_bar_starts_on_a_line_of_its_own(corpus: Path) -> None:
    result = CliRunner().invoke(main, ["build", str(corpus), "--progress"])
    assert result.exit_code == 0, result.output
    [line] = [x for x in result.output.splitlines() if "huge.txt" in x]
    assert line.lstrip("\r").startswith("{"), line  # the JSON log line, not after a bar
