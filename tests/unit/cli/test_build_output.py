"""What `adrap build` prints: each file it cannot read once, and log lines that leave the bar whole."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from testkit.fakes import CountingEmbedder


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


def test_a_build_whose_llm_cannot_be_reached_fails_before_reading_or_embedding(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LLM was first asked once every leaf was embedded (hours on a big share), and the
    build failed only then. The real client asks a port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("ADRAP_SUMMARY__BACKEND", "openai")
    monkeypatch.setenv("ADRAP_SUMMARY__OPENAI__BASE_URL", f"http://127.0.0.1:{port}/v1")
    embedder = CountingEmbedder()
    monkeypatch.setattr("ingestor.cli.build.make_embedder", lambda _settings: embedder)
    # `add` on a tree built already: the extractive summariser built it
    monkeypatch.setenv("ADRAP_SUMMARY__BACKEND", "extractive")
    assert CliRunner().invoke(main, ["build", str(corpus), "--no-progress"]).exit_code == 0
    embedder.texts.clear()
    monkeypatch.setenv("ADRAP_SUMMARY__BACKEND", "openai")
    (corpus / "new.txt").write_text("A new file about the harbour's lighthouse keepers.")
    for command in (["build", str(corpus), "--no-progress"], ["add", str(corpus)]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 1, result.output
        assert f"127.0.0.1:{port}" in result.output
        assert "start the server, or fix ADRAP_SUMMARY__OPENAI__BASE_URL" in result.output
        assert embedder.texts == [], f"{command[0]}: leaves embedded before the LLM was asked"
