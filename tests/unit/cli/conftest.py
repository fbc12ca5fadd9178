"""A small tree built through the CLI on a real qdrant-edge shard, with the hashing embedder."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import build as build_cli
from ingestor.cli import main
from ingestor.cli import query as query_cli
from testkit.fakes import HashEmbedder


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``docs/`` with two readable fables in ``it/`` and ``fables/`` and one file too large."""
    root = tmp_path / "docs"
    (root / "it").mkdir(parents=True)
    (root / "fables").mkdir()
    (root / "fables" / "fox.txt").write_text("The fox could not reach the grapes: sour, he said.\n")
    (root / "it" / "crow.txt").write_text("The crow dropped the cheese when the fox praised it.\n")
    (root / "huge.txt").write_text("too long " * 500)
    monkeypatch.setenv("ADRAP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ADRAP_READ__MAX_FILE_BYTES", "1000")
    monkeypatch.setattr(build_cli, "make_embedder", lambda settings: HashEmbedder())
    monkeypatch.setattr(query_cli, "make_query_embedder", lambda settings: HashEmbedder())
    return root


@pytest.fixture
def built(corpus: Path) -> Path:
    """The corpus, built into the tree ``default``."""
    result = CliRunner().invoke(main, ["build", str(corpus), "--no-progress"])
    assert result.exit_code == 0, result.output
    return corpus
