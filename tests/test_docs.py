"""The docs keep up with the code: every command documented, every payload field in the README."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from retriever import NodePayload

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_has_help_with_an_example_and_is_in_docs_cli(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output
    assert f"## adrap {name}" in (ROOT / "docs" / "cli.md").read_text()


def test_readme_documents_every_payload_field() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [f for f in NodePayload.model_fields if f"`{f}`" not in readme]
    assert missing == []


def test_readme_holds_the_two_setup_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
