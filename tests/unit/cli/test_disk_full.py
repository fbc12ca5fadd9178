"""Writing commands on a disk short of ``ADRAP_MIN_FREE_MB``: refused first, with the reason.

Before, ``adrap add`` read and embedded every file, then wrote into the store's mapped files on
a full disk: killed by SIGBUS as a service account, or, as root (the filesystem's reserved
blocks), an engine error that advised deleting the store and rebuilding. And a full disk made
``adrap status`` call the state database unreadable and say to delete it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from models_store import CorruptModelError, ModelStoreError
from models_store.rows_connection import connect

HUGE_MB = str(1 << 30)


def test_a_writing_command_is_refused_before_it_reads_when_the_disk_is_short(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (built / "fables" / "owl.txt").write_text("The owl watched the fox from the hollow oak.\n")
    monkeypatch.setenv("ADRAP_MIN_FREE_MB", HUGE_MB)
    added = CliRunner().invoke(main, ["add", str(built / "fables")])
    assert added.exit_code != 0
    assert "not enough free disk space to run adrap add" in added.output
    assert "ADRAP_MIN_FREE_MB" in added.output
    assert "nothing was changed" in added.output
    status = CliRunner().invoke(main, ["status"])
    assert status.exit_code == 0, status.output
    assert "so updates wait" in status.output  # the disk_free line says why
    monkeypatch.setenv("ADRAP_MIN_FREE_MB", "0")  # 0: never checked
    added = CliRunner().invoke(main, ["add", str(built / "fables")])
    assert added.exit_code == 0, added.output
    status = CliRunner().invoke(main, ["status"])
    assert "documents                    3" in status.output
    assert "writes keep 0 MiB free" in status.output


def test_a_state_database_that_cannot_be_opened_now_is_never_called_damaged(
    tmp_path: Path,
) -> None:
    """SQLite's SQLITE_IOERR / SQLITE_FULL / SQLITE_CANTOPEN: the file is fine."""
    folder = tmp_path / "a-folder.sqlite"
    folder.mkdir()  # SQLITE_CANTOPEN: what no disk space and no permission look like too
    with pytest.raises(ModelStoreError, match="nothing was changed") as caught:
        connect(folder, created=False, readonly=False)
    assert not isinstance(caught.value, CorruptModelError)
    assert "delete it" not in str(caught.value)
    assert "MiB now" in str(caught.value)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all " * 300)
    with pytest.raises(CorruptModelError, match="delete it and rebuild"):
        connect(garbage, created=False, readonly=False)
