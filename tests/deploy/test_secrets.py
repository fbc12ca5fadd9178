"""Secrets mounted as files (compose ``secrets:``, Kubernetes Secret volumes) reach Settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestor.config import Settings


def test_a_nested_secret_file_sets_the_nested_setting(tmp_path: Path) -> None:
    (tmp_path / "adrap_qdrant__api_key").write_text("k3y\n")
    (tmp_path / "adrap_embed__openai__api_key").write_text("sk-embed")
    s = Settings(_env_file=None, _secrets_dir=tmp_path)  # type: ignore[call-arg]
    assert s.qdrant.api_key is not None
    assert s.qdrant.api_key.get_secret_value() == "k3y"  # the newline is stripped
    assert s.embed.openai.api_key is not None
    assert s.embed.openai.api_key.get_secret_value() == "sk-embed"


def test_the_environment_wins_over_a_secret_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "adrap_qdrant__api_key").write_text("from-file")
    monkeypatch.setenv("ADRAP_QDRANT__API_KEY", "from-env")
    s = Settings(_env_file=None, _secrets_dir=tmp_path)  # type: ignore[call-arg]
    assert s.qdrant.api_key is not None
    assert s.qdrant.api_key.get_secret_value() == "from-env"
