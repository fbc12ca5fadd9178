"""Settings files, one test per source, and their precedence: env > --env-file > state dir's >
user's > defaults; ./.env is never read (a shared folder's .env must not redirect adrap)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main


def _max_tokens(*args: str) -> int:
    result = CliRunner().invoke(main, [*args, "config"])
    assert result.exit_code == 0, result.output
    value: int = json.loads(result.stdout)["chunk"]["max_tokens"]
    return value


@pytest.fixture
def user_file() -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "adrap" / "adrap.env"
    path.parent.mkdir(parents=True)
    path.write_text("ADRAP_CHUNK__MAX_TOKENS=111\n")
    return path


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("ADRAP_STATE_DIR", str(state))
    return state


def test_the_user_settings_file_is_read(user_file: Path, state_dir: Path) -> None:
    assert _max_tokens() == 111


def test_the_state_dirs_file_is_read_and_wins_over_the_users(
    user_file: Path, state_dir: Path
) -> None:
    (state_dir / "adrap.env").write_text("ADRAP_CHUNK__MAX_TOKENS=222\n")
    assert _max_tokens() == 222


def test_the_state_dirs_file_in_the_trees_home_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    home = Path(os.environ["XDG_DATA_HOME"]) / "adrap" / "notes"
    home.mkdir(parents=True)
    (home / "adrap.env").write_text("ADRAP_CHUNK__MAX_TOKENS=333\n")
    assert _max_tokens("--tree", "notes") == 333
    assert _max_tokens() == 333  # the only tree


def test_an_explicit_env_file_wins_over_the_state_dirs(
    user_file: Path, state_dir: Path, tmp_path: Path
) -> None:
    (state_dir / "adrap.env").write_text("ADRAP_CHUNK__MAX_TOKENS=222\n")
    team = tmp_path / "team.env"
    team.write_text("ADRAP_CHUNK__MAX_TOKENS=444\n")
    assert _max_tokens("--env-file", str(team)) == 444


def test_an_environment_variable_wins_over_every_file(
    user_file: Path, state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (state_dir / "adrap.env").write_text("ADRAP_CHUNK__MAX_TOKENS=222\n")
    team = tmp_path / "team.env"
    team.write_text("ADRAP_CHUNK__MAX_TOKENS=444\n")
    monkeypatch.setenv("ADRAP_CHUNK__MAX_TOKENS", "555")
    assert _max_tokens("--env-file", str(team)) == 555


def test_the_user_file_can_say_where_the_state_dir_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "adrap" / "adrap.env"
    path.parent.mkdir(parents=True)
    state = tmp_path / "kept"
    state.mkdir()
    (state / "adrap.env").write_text("ADRAP_CHUNK__MAX_TOKENS=666\n")
    path.write_text(f"ADRAP_STATE_DIR={state}\n")
    result = CliRunner().invoke(main, ["config"])
    assert json.loads(result.stdout)["state_dir"] == str(state)
    assert json.loads(result.stdout)["chunk"]["max_tokens"] == 666


def test_a_state_dirs_file_cannot_move_the_state_dir(state_dir: Path) -> None:
    (state_dir / "adrap.env").write_text("ADRAP_STATE_DIR=/elsewhere\n")
    result = CliRunner().invoke(main, ["config"])
    assert result.exit_code == 1
    assert "ADRAP_STATE_DIR" in result.output
    assert "remove the line" in result.output


def test_a_dotenv_in_the_current_directory_is_not_read_and_a_note_says_so(
    state_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("ADRAP_CHUNK__MAX_TOKENS=777\n")
    result = CliRunner().invoke(main, ["config"])
    assert json.loads(result.stdout)["chunk"]["max_tokens"] == 250
    assert "not read" in result.stderr
    assert "--env-file" in result.stderr
    assert _max_tokens("--env-file", ".env") == 777
