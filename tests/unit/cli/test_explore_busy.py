"""`adrap explore` on a tree a daemon watches points at the live page, not at "a moment ago"."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from ingestor.cli import main
from ingestor.service.locking import state_lock


def test_explore_names_the_daemon_and_its_dashboard(built: Path, tmp_path: Path) -> None:
    with state_lock(tmp_path / "state", "watch") as lock:
        lock.describe(http="127.0.0.1:8765")
        result = CliRunner().invoke(main, ["explore", "-o", str(tmp_path / "t.html")])
    assert result.exit_code == 1
    assert "a moment ago" not in result.output
    assert result.output == (
        f"Error: tree 'default' in {str(tmp_path / 'state')!r} is watched by adrap watch "
        f"(pid {os.getpid()}), which serves this page live at http://127.0.0.1:8765/dashboard\n"
    )
