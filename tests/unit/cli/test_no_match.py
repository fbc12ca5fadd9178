"""`adrap query` says when nothing in the tree seems to answer, shows the hits, and exits 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from ingestor.cli.factories import min_score
from ingestor.cli.query import NO_MATCH_EXIT
from ingestor.config import NO_MATCH_SCORE, Settings


def test_a_query_below_the_threshold_says_so_shows_the_hits_and_exits_3(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADRAP_QUERY__MIN_SCORE", "0.999")
    result = CliRunner().invoke(main, ["query", "sour grapes"])
    assert result.exit_code == NO_MATCH_EXIT == 3
    assert "nothing in tree 'default' seems to answer" in result.stderr
    assert "grapes" in result.stdout  # the closest passages are still shown
    result = CliRunner().invoke(main, ["query", "sour grapes", "--json"])
    assert result.exit_code == 3
    out = json.loads(result.stdout)
    assert out["no_match"] is True
    assert out["hits"]


def test_a_query_above_the_threshold_exits_0(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADRAP_QUERY__MIN_SCORE", "0")
    result = CliRunner().invoke(main, ["query", "sour grapes", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["no_match"] is False


def test_the_threshold_is_calibrated_for_the_packaged_model_only() -> None:
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert min_score(s, s.embed.model) == NO_MATCH_SCORE > 0
    assert min_score(s, "/models/bge") is None
    chosen = Settings(_env_file=None, query={"min_score": 0.5})  # type: ignore[call-arg]
    assert min_score(chosen, "/models/bge") == 0.5


def test_ask_with_nothing_matching_exits_3_too(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADRAP_QUERY__MIN_SCORE", "0.999")
    result = CliRunner().invoke(main, ["ask", "sour grapes"])
    assert result.exit_code == 3
    assert "seems to answer" in result.stderr
    assert "grapes" in result.stdout  # no LLM: the best context, still shown
