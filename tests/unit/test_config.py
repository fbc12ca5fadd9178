from __future__ import annotations

import os
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
    assert "ADRAP_QDRANT__TIMEOUT='-1': Input should be greater than 0" in result.output
    assert "errors.pydantic.dev" not in result.output


@pytest.mark.parametrize(
    ("name", "value", "example"),
    [
        ("ADRAP_CHUNK__MAX_TOKENS", "abc", "ADRAP_CHUNK__MAX_TOKENS=250"),
        ("ADRAP_QUERY__MODE", "fast", "ADRAP_QUERY__MODE=collapsed"),
        ("ADRAP_READ__IGNORE", "[not json", "ADRAP_READ__IGNORE=.*,"),
        ("ADRAP_WATCH__POLLING", "maybe", "ADRAP_WATCH__POLLING=true"),
        # A URL without its scheme was taken as a path of OpenAI's own endpoint.
        (
            "ADRAP_SUMMARY__OPENAI__BASE_URL",
            "localhost:8080",
            "ADRAP_SUMMARY__OPENAI__BASE_URL=http://localhost:8080/v1",
        ),
        ("ADRAP_EMBED__OPENAI__BASE_URL", "ftp://x", "not an http(s) URL"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable_the_value_and_an_example(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, example: str
) -> None:
    from click.testing import CliRunner

    from ingestor.cli import main

    monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, ["config"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1, result.output
    assert f"{name}={value!r}:" in result.output
    assert example in result.output
    assert "Traceback" not in result.output


def test_a_section_check_names_the_variables_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from ingestor.cli import main

    monkeypatch.setenv("ADRAP_CHUNK__OVERLAP", "300")
    result = CliRunner().invoke(main, ["config"])
    assert result.output == (
        "Error: ADRAP_CHUNK__OVERLAP='300': chunk overlap (300) must be smaller than "
        "max_tokens (250)\n"
    )


@pytest.mark.parametrize(
    ("env", "bound"),
    [
        ({}, 20_000),
        ({"ADRAP_SUMMARY__BACKEND": "openai"}, 0),
        ({"ADRAP_SUMMARY__BACKEND": "openai", "ADRAP_ADRAP__REBUILD_MAX_LEAVES": "500"}, 500),
        ({"ADRAP_ADRAP__REBUILD_MAX_LEAVES": "0"}, 0),
    ],
)
def test_a_tree_an_llm_summarises_is_never_rebuilt_by_itself_unless_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], bound: int
) -> None:
    """Any tree of up to 20,000 leaves was rebuilt once an update took it past the drift
    threshold: with an LLM, one large add started a call for every summary of the tree."""
    from ingestor.cli.factories import make_pipeline
    from retriever.edge_store import EdgeNodeStore
    from testkit.fakes import HashEmbedder

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = Settings(_env_file=None, state_dir=tmp_path)  # type: ignore[call-arg]
    assert s.rebuild_bound == bound
    with EdgeNodeStore(tmp_path / "qdrant") as store:
        p = make_pipeline(s, store, HashEmbedder())
        assert p.apply_stage.rebuild_max_leaves == bound


def test_an_empty_endpoint_is_unset_and_an_unnamed_llm_is_refused_only_when_it_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ADRAP_SUMMARY__OPENAI__BASE_URL=`` (a compose file's unset variable) and an empty model
    were taken as they were: every summary failed after the leaves were embedded, the error
    naming "model '' at " (no model, no address)."""
    monkeypatch.setenv("ADRAP_SUMMARY__OPENAI__BASE_URL", " ")
    monkeypatch.setenv("ADRAP_EMBED__OPENAI__BASE_URL", "")
    monkeypatch.setenv("ADRAP_SUMMARY__OPENAI__MODEL", "")
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.summary.openai.base_url is None  # the client's default: OpenAI's
    assert s.embed.openai.base_url == "https://api.openai.com/v1"
    monkeypatch.setenv("ADRAP_SUMMARY__BACKEND", "openai")  # now the empty model is used
    with pytest.raises(ValidationError, match="ADRAP_SUMMARY__OPENAI__MODEL is empty"):
        Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("ADRAP_READ__TEXT_SUFFIXES", ".sql, .cfg", [".sql", ".cfg"]),
        ("ADRAP_READ__TEXT_SUFFIXES", '[".sql"]', [".sql"]),
        ("ADRAP_READ__TEXT_SUFFIXES", "", []),
        ("ADRAP_WATCH__ALLOWED_HOSTS", "adrap.example.org", ["adrap.example.org"]),
        ("ADRAP_READ__IGNORE", "Thumbs.db", ["Thumbs.db"]),
        ("ADRAP_READ__IGNORE", '["a", "b,c"]', ["a", "b,c"]),
    ],
)
def test_list_settings_take_a_comma_separated_string_or_json(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: list[str]
) -> None:
    monkeypatch.setenv(name, value)
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    section, field = name.removeprefix("ADRAP_").lower().split("__")
    assert getattr(getattr(s, section), field) == expected


@pytest.mark.parametrize(
    "value", ["+*.bak, drafts", '+["*.bak", "drafts"]', '["+*.bak", "drafts"]']
)
def test_ignore_patterns_starting_with_plus_add_to_the_defaults(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from ingestor.read.listing import DEFAULT_IGNORE

    monkeypatch.setenv("ADRAP_READ__IGNORE", value)
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.read.ignore == [*DEFAULT_IGNORE, "*.bak", "drafts"]


def test_ignore_patterns_added_in_a_dotenv_file_keep_the_defaults(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("ADRAP_READ__IGNORE=+*.bak\n")
    s = Settings(_env_file=env)  # type: ignore[call-arg]
    assert s.read.ignore[-1] == "*.bak"
    assert ".*" in s.read.ignore


def test_version_prints_the_package_version() -> None:
    from importlib.metadata import version

    from click.testing import CliRunner

    from ingestor.cli import main

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"adrap {version('adrap')}\n"


def _setting(s: Settings, env: str) -> object:
    """The value of the setting named by the variable ``env`` (``ADRAP_WATCH__DEBOUNCE_SECONDS``)."""
    value: object = s
    for part in env.removeprefix("ADRAP_").lower().split("__"):
        value = getattr(value, part)
    return value


def test_env_example_quotes_every_default_as_the_settings_have_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A default written in .env.example, read as the setting, is the setting's default (one
    source: config.py); a sample for a setting unset by default (a URL, a key) is not checked."""
    for name in list(os.environ):
        if name.startswith("ADRAP_"):
            monkeypatch.delenv(name)
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    text = (ROOT / "deploy" / ".env.example").read_text()
    checked = 0
    for env, raw in re.findall(r"^# (ADRAP_[A-Z0-9_]+)=(.*)$", text, flags=re.M):
        raw = re.sub(r"\s+#.*$", "", raw)  # an inline comment
        default = _setting(defaults, env)
        if raw == "" or default in (None, [], "") or env == "ADRAP_STATE_DIR":
            continue
        monkeypatch.setenv(env, raw)
        quoted = _setting(Settings(_env_file=None), env)  # type: ignore[call-arg]
        monkeypatch.delenv(env)
        if hasattr(default, "get_secret_value"):
            continue
        assert quoted == default, f".env.example says {env}={raw}, the default is {default!r}"
        checked += 1
    assert checked > 60
