"""`adrap add --defer-summaries` then `adrap refresh`: the CLI's way to pay for summaries once
over several updates, as the daemon's window does (issue 34)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import build as build_cli
from ingestor.cli import factories, main
from testkit.fakes import HashEmbedder
from tests.unit.tree.test_adrap import doc_text


def stale(runner: CliRunner) -> int:
    result = runner.invoke(main, ["status", "--json"])
    assert result.exit_code == 0, result.output
    return int(json.loads(result.output)["stale_summaries"])


def test_deferred_updates_leave_stale_summaries_that_one_refresh_pays_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(3)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(24):
        (root / f"d{i}.txt").write_text(doc_text(rng, 4))
    monkeypatch.setenv("ADRAP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ADRAP_SUMMARY__MIN_CHANGE", "0")  # every touched summary is stale
    monkeypatch.setattr(build_cli, "make_embedder", lambda settings: HashEmbedder())
    monkeypatch.setattr(factories, "make_embedder", lambda settings: HashEmbedder())
    runner = CliRunner()
    result = runner.invoke(main, ["build", str(root), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert stale(runner) == 0

    for i in range(2):
        new = root / f"new{i}.txt"
        new.write_text(doc_text(rng, 4))
        result = runner.invoke(main, ["add", "--defer-summaries", str(new)])
        assert result.exit_code == 0, result.output
    waiting = stale(runner)
    assert waiting > 0, "the deferred updates left their summaries stale"

    result = runner.invoke(main, ["refresh"])
    assert result.exit_code == 0, result.output
    assert f"summaries regenerated {waiting} " in result.output, result.output
    assert stale(runner) == 0

    result = runner.invoke(main, ["remove", str(root / "d0.txt")])  # not deferred: paid at once
    assert result.exit_code == 0, result.output
    assert stale(runner) == 0
