"""`adrap relocate`: a share mounted at another path keeps its tree. The state recorded the old
root and refused the new one ("built over ..."), so a moved NAS mount or a container's `/data`
meant building the whole tree again: every leaf embedded, every summary paid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from ingestor.cli import main
from ingestor.service.share import SHARE_FILE


def _status() -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["status", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_a_moved_share_keeps_its_tree_and_a_stranger_folder_is_refused(
    built: Path, tmp_path: Path
) -> None:
    before = _status()
    state_dir = Path(before["state_dir"])
    (state_dir / SHARE_FILE).write_text('{"device": 1}')
    moved = tmp_path / "mnt" / "docs"
    moved.parent.mkdir()
    shutil.move(str(built), moved)
    refused = CliRunner().invoke(main, ["add", str(moved)])
    assert refused.exit_code != 0
    assert "adrap relocate" in refused.output

    stranger = tmp_path / "other"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("nothing of the tree")
    no = CliRunner().invoke(main, ["relocate", str(stranger)])
    assert no.exit_code == 1
    assert "does not look like the share" in no.output
    assert "--force" in no.output
    assert _status()["root"] == before["root"], "a refused move changes nothing"

    yes = CliRunner().invoke(main, ["relocate", str(moved)])
    assert yes.exit_code == 0, yes.output
    assert "2 of 2 files sampled found there" in yes.output
    after = _status()
    assert after["root"] == str(moved)
    assert after["leaves"] == before["leaves"]
    assert not (state_dir / SHARE_FILE).exists(), "the new mount's device is recorded afresh"
    again = CliRunner().invoke(main, ["add", str(moved)])
    assert again.exit_code == 0, again.output
    assert "leaves +0 -0" in again.output, "nothing read as new, nothing removed"
    changes = json.loads(CliRunner().invoke(main, ["changes", "--json"]).output)
    assert any(r["kind"] == "relocated" for r in changes["records"])


def test_relocate_force_moves_the_tree_to_a_folder_lacking_its_files(
    built: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    forced = CliRunner().invoke(main, ["relocate", str(empty), "--force"])
    assert forced.exit_code == 0, forced.output
    assert "0 of 2 files sampled" in forced.output
    assert _status()["root"] == str(empty)
