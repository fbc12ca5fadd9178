"""The digest's LLM answer (`adrap changes --digest --llm`) asks for at most
``ADRAP_ANSWER__MAX_TOKENS`` tokens (and never more than 400): it asked for 400 whatever the
setting, so a user bounding answers to 100 tokens paid for 400 on every digest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from ingestor.cli import factories, main
from tests.unit.answer.test_postqfrap import fake_llm, reply


@pytest.mark.parametrize(("setting", "asked"), [("48", 48), (None, 400), ("4000", 400)])
def test_the_digest_answer_is_bounded_by_the_answer_setting(
    built: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None, asked: int
) -> None:
    requests: list[dict[str, Any]] = []

    def handler(body: dict[str, Any]) -> httpx.Response:
        requests.append(body)
        return reply("The fables changed [1].")

    monkeypatch.setattr(factories, "make_summarizer", lambda settings: fake_llm(handler))
    monkeypatch.setenv("ADRAP_SUMMARY__BACKEND", "openai")
    if setting is not None:
        monkeypatch.setenv("ADRAP_ANSWER__MAX_TOKENS", setting)
    result = CliRunner().invoke(main, ["changes", "--digest", "--llm", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["digest"]["answer"] == "The fables changed [1]."
    assert [r.get("max_tokens", r.get("max_completion_tokens")) for r in requests] == [asked]
