"""One home for trees: a tree built from one directory answers from any other."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import build as build_cli
from ingestor.cli import main
from ingestor.cli import query as query_cli
from testkit.fakes import HashEmbedder


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two fables in ``notes/`` and directories to stand in; the hashing embedder everywhere."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "fox.txt").write_text("The fox could not reach the grapes: sour, he said.\n")
    (root / "crow.txt").write_text("The crow dropped the cheese when the fox praised it.\n")
    for where in ("here", "elsewhere"):
        (tmp_path / where).mkdir()
    monkeypatch.setattr(build_cli, "make_embedder", lambda settings: HashEmbedder())
    monkeypatch.setattr(query_cli, "make_query_embedder", lambda settings: HashEmbedder())
    return root


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def _json(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out: dict[str, object] = json.loads(result.stdout)
    return out


def test_a_tree_built_in_one_directory_answers_a_query_from_another(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent / "here")
    code, out = _run("build", str(folder), "--no-progress")
    assert code == 0, out
    home = Path(os.environ["XDG_DATA_HOME"]) / "adrap" / "default"
    assert (home / "qdrant").is_dir()
    assert not (folder.parent / "here" / ".adrap").exists()
    monkeypatch.chdir(folder.parent / "elsewhere")
    assert _json("query", "sour grapes")["hits"]


def test_several_trees_need_a_name_and_the_error_lists_them(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent / "here")
    for name in ("notes", "work"):
        code, out = _run("build", str(folder), "--no-progress", "--tree", name)
        assert code == 0, out
    code, out = _run("query", "sour grapes")
    assert code == 1
    assert out.count("\n") == 1, out  # one line
    assert "several trees" in out
    assert "notes, work" in out
    assert "--tree" in out
    assert _json("query", "sour grapes", "--tree", "work")["tree"] == "work"
    assert _json("--tree", "notes", "status")["tree"] == "notes"  # the group's option too
    code, out = _run("trees")
    assert code == 0, out
    assert "notes" in out
    assert "work" in out


def test_the_only_tree_is_found_without_its_name(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent / "here")
    assert _run("build", str(folder), "--no-progress", "--tree", "notes")[0] == 0
    assert _json("status")["tree"] == "notes"


def test_a_state_dir_in_the_current_directory_is_still_opened_and_said(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = folder.parent / "here"
    monkeypatch.chdir(here)
    code, out = _run("build", str(folder), "--no-progress", "--state-dir", ".adrap")  # as before
    assert code == 0, out
    result = CliRunner().invoke(main, ["query", "sour grapes", "--json"])
    assert result.exit_code == 0, result.output
    assert "using the state dir .adrap found in the current directory" in result.stderr
    assert _json("status")["state_dir"] == str((here / ".adrap").resolve())
    assert not (Path(os.environ["XDG_DATA_HOME"]) / "adrap").exists()


def test_a_dot_adrap_folder_that_is_no_state_dir_is_left_alone(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make demo`` used to build into ``.adrap/demo``: that ``.adrap`` holds no tree itself."""
    here = folder.parent / "here"
    (here / ".adrap" / "demo" / "qdrant").mkdir(parents=True)
    monkeypatch.chdir(here)
    assert _run("build", str(folder), "--no-progress")[0] == 0
    assert (Path(os.environ["XDG_DATA_HOME"]) / "adrap" / "default" / "qdrant").is_dir()


def test_an_explicit_state_dir_wins_over_the_home(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent / "here")
    state = folder.parent / "mine"
    code, out = _run("build", str(folder), "--no-progress", "--state-dir", str(state))
    assert code == 0, out
    assert (state / "qdrant").is_dir()
    monkeypatch.setenv("ADRAP_STATE_DIR", str(state))
    assert _run("query", "sour grapes")[0] == 0


def test_status_shows_no_python_reprs(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither ``None`` nor a dict's ``{'0': 20}``: a person reads ``-`` and ``0: 20, 1: 3``."""
    monkeypatch.chdir(folder.parent / "here")
    assert _run("build", str(folder), "--no-progress")[0] == 0
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 0, result.output
    assert "None" not in result.stdout
    assert "{" not in result.stdout
    assert "quarantined                  none" in result.stdout


def test_an_unnamed_build_beside_other_trees_is_default_and_the_order_is_checked(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`build` may create its tree: unnamed, it is `default` even beside `notes` and `work`. The
    Ctx asks for it explicitly (it was a flag to set before the first read of the settings)."""
    from ingestor.cli.app import Ctx

    monkeypatch.chdir(folder.parent / "here")
    for name in ("notes", "work"):
        assert _run("build", str(folder), "--no-progress", "--tree", name)[0] == 0
    code, out = _run("build", str(folder), "--no-progress")
    assert code == 0, out
    assert "built tree 'default'" in out
    ctx = Ctx(verbose=False)
    assert ctx.settings_for(creating=True).tree == "default"
    read_first = Ctx(verbose=False, tree="notes")
    assert read_first.settings.tree == "notes"
    with pytest.raises(RuntimeError, match="read before the command said it may create its tree"):
        read_first.settings_for(creating=True)


def test_status_without_a_daemon_shows_the_owner_the_access_classes(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no daemon running, `adrap status` said nothing of who may read what; its reader is
    the tree's owner (it reads the state dir), shown every class: files and readers."""
    import pwd

    os.chmod(folder / "crow.txt", 0o600)
    monkeypatch.chdir(folder.parent / "here")
    assert _run("build", str(folder), "--no-progress")[0] == 0
    out = _json("status")
    assert out["caller"] == {"name": "owner", "uid": None, "gids": [], "unrestricted": True}
    access = out["access"]
    assert isinstance(access, dict)
    assert access["classes"] == 2
    readers = sorted(", ".join(row["readers"]) for row in access["by_class"])
    assert readers == sorted(["world", f"user:{pwd.getpwuid(os.getuid()).pw_name}"])
    assert all(row["files"] == 1 for row in access["by_class"])
    code, said = _run("status")
    assert code == 0
    assert "access                       classes: 2, readable_by_caller: all" in said
    assert "1 files  world" in said
