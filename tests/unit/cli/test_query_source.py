"""`adrap query --source`: a folder without its slash, or a path on disk, matches that folder/file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main


def _sources(built: Path, source: str) -> tuple[set[str], str]:
    result = CliRunner().invoke(main, ["query", "fox", "--json", "--source", source])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    return {h["source"] for h in out["hits"]}, result.stderr


@pytest.mark.parametrize("form", ["it", "it/", "./it", "/it"])
def test_a_folder_with_or_without_its_slash_matches_the_files_under_it(
    built: Path, form: str
) -> None:
    assert _sources(built, form) == ({"it/crow.txt"}, "")


def test_an_absolute_path_on_disk_inside_the_root_matches_its_folder(built: Path) -> None:
    assert _sources(built, str(built / "fables")) == ({"fables/fox.txt"}, "")
    assert _sources(built, str(built / "fables" / "fox.txt")) == ({"fables/fox.txt"}, "")


def test_a_path_relative_to_the_current_directory_matches(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(built.parent)
    assert _sources(built, "docs/it") == ({"it/crow.txt"}, "")
    monkeypatch.chdir(built / "fables")
    assert _sources(built, "../it/crow.txt") == ({"it/crow.txt"}, "")


def test_the_root_itself_filters_nothing(built: Path) -> None:
    found, _ = _sources(built, str(built))
    assert found == {"it/crow.txt", "fables/fox.txt"}


def test_a_filter_matching_no_document_says_so_on_stderr(built: Path) -> None:
    found, err = _sources(built, "nowhere")
    assert found == set()
    assert err.startswith("note: --source 'nowhere' matches no document of tree 'default'")
    assert err.count("\n") == 1
