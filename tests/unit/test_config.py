from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from ingestor.config import Settings, env_names

ROOT = Path(__file__).resolve().parents[2]


def test_nested_environment_variables_reach_the_sub_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ADRAP_QDRANT__URL", "http://qdrant:6333")
    monkeypatch.setenv("ADRAP_QDRANT__API_KEY", "s3cret")
    monkeypatch.setenv("ADRAP_CHUNK__MAX_TOKENS", "300")
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.qdrant.url == "http://qdrant:6333"
    assert s.store_mode == "server"
    assert s.chunk.max_tokens == 300


def test_secrets_are_masked_in_the_printed_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADRAP_SUMMARY__OPENAI__API_KEY", "sk-very-secret")
    dumped = str(Settings(_env_file=None).masked())  # type: ignore[call-arg]
    assert "sk-very-secret" not in dumped
    assert "**********" in dumped


def test_the_default_store_is_embedded() -> None:
    assert Settings(_env_file=None).store_mode == "embedded"  # type: ignore[call-arg]


def test_an_overlap_not_smaller_than_the_chunk_is_refused() -> None:
    with pytest.raises(ValidationError, match="overlap"):
        Settings(_env_file=None, chunk={"max_tokens": 50, "overlap": 50})  # type: ignore[call-arg]


def test_unknown_variables_in_a_dotenv_file_are_refused(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("ADRAP_QDRANT__URLL=http://typo\n")
    with pytest.raises(ValidationError):
        Settings(_env_file=env)  # type: ignore[call-arg]


def test_env_example_lists_every_setting() -> None:
    text = (ROOT / "deploy" / ".env.example").read_text()
    listed = set(re.findall(r"^#?\s*(ADRAP_[A-Z0-9_]+)=", text, flags=re.M))
    assert listed == set(env_names())


def test_the_cli_names_each_invalid_variable_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from ingestor.cli import main

    monkeypatch.setenv("ADRAP_QDRANT__TIMEOUT", "-1")
    result = CliRunner().invoke(main, ["config"])
    assert result.exit_code == 1
    assert "ADRAP_QDRANT__TIMEOUT: Input should be greater than 0" in result.output
    assert "errors.pydantic.dev" not in result.output
