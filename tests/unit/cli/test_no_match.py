"""`adrap query` says when nothing in the tree seems to answer, shows the hits, and exits 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from ingestor.cli.factories import make_query_service, min_score, opened_store
from ingestor.cli.query import NO_MATCH_EXIT
from ingestor.config import NO_MATCH_SCORE, PACKAGED_MODEL, Settings
from retriever.model_switch import FollowingEmbedder
from testkit.fakes import HashEmbedder


def test_a_query_below_the_threshold_says_so_shows_the_hits_and_exits_3(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADRAP_QUERY__MIN_SCORE", "0.999")
    result = CliRunner().invoke(main, ["query", "sour grapes of the zeppelin"])
    assert result.exit_code == NO_MATCH_EXIT == 3
    assert "nothing in tree 'default' seems to answer" in result.stderr
    assert "grapes" in result.stdout  # the closest passages are still shown
    result = CliRunner().invoke(main, ["query", "sour grapes of the zeppelin", "--json"])
    assert result.exit_code == 3
    out = json.loads(result.stdout)
    assert out["no_match"] is True
    assert out["hits"]


@pytest.mark.parametrize("question", ["sour grapes", "the fox's grape", "Cheese dropped by crows"])
def test_a_passage_holding_every_word_of_the_question_answers_it_whatever_its_score(
    built: Path, monkeypatch: pytest.MonkeyPatch, question: str
) -> None:
    """A few rare words in a passage about something else score low as a whole: the passage that
    holds them all is not called "nothing answers" (stemmed, stop words left out)."""
    monkeypatch.setenv("ADRAP_QUERY__MIN_SCORE", "0.999")
    for mode in ("collapsed", "traversal", "postqfrap"):
        result = CliRunner().invoke(main, ["query", question, "--json", "--mode", mode])
        assert result.exit_code == 0, (mode, result.output)
        out = json.loads(result.stdout)
        assert out["no_match"] is False
        assert out["best_score"] < out["min_score"]  # the score alone would have said so


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


@pytest.mark.parametrize(("setting", "before", "after"), [
    (None, NO_MATCH_SCORE, None),
    ("0.5", 0.5, 0.5),
])  # fmt: skip
def test_the_threshold_follows_the_daemons_query_embedder_across_a_model_switch(
    built: Path,
    monkeypatch: pytest.MonkeyPatch,
    setting: str | None,
    before: float | None,
    after: float | None,
) -> None:
    """A daemon's questions are embedded with the old model until the switch, then the new one:
    the packaged model's calibrated threshold applies before it only (the setting always)."""
    if setting is not None:
        monkeypatch.setenv("ADRAP_QUERY__MIN_SCORE", setting)
    old, new = HashEmbedder(), HashEmbedder(seed=1)
    old.model_id, new.model_id = PACKAGED_MODEL, "/models/e5"  # same size: one store serves
    follower = FollowingEmbedder(old, new, PACKAGED_MODEL)
    settings = Settings()
    with opened_store(settings) as store:
        queries = make_query_service(settings, store, follower)
        assert queries.query({"q": "sour grapes"})["min_score"] == before
        follower.switch()
        assert queries.query({"q": "sour grapes"})["min_score"] == after


def test_ask_with_nothing_matching_exits_3_too(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADRAP_QUERY__MIN_SCORE", "0.999")
    result = CliRunner().invoke(main, ["ask", "sour grapes of the zeppelin"])
    assert result.exit_code == 3
    assert "seems to answer" in result.stderr
    assert "grapes" in result.stdout  # no LLM: the best context, still shown
