"""`adrap explore` writes the tree's text into one file: readable by its writer alone (issue 53)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from click.testing import CliRunner

from ingestor.cli import main


def test_explore_writes_a_file_only_its_writer_may_read(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "tree.html"
    old = os.umask(0o022)  # the usual umask: a plain write would leave it world-readable
    try:
        result = CliRunner().invoke(main, ["explore", "-o", str(out)])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "<html" in out.read_text(encoding="utf-8").lower()
    out.chmod(0o644)  # as an earlier version left it: written again, private again
    assert CliRunner().invoke(main, ["explore", "-o", str(out)]).exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
