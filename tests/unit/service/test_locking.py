"""One writer per state dir: a second holder, in another process, is refused with a clear message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingestor.service.locking import LockedError, read_holder, state_lock

ROOT = Path(__file__).resolve().parents[2]

TRY_LOCK = """
import sys
from pathlib import Path
from ingestor.service.locking import LockedError, state_lock
try:
    with state_lock(Path(sys.argv[1]), "watch"):
        print("locked")
except LockedError as exc:
    print(exc)
    sys.exit(1)
"""


def try_lock_in_another_process(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", TRY_LOCK, str(state)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_a_second_writer_in_another_process_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    with state_lock(tmp_path, "watch") as lock:
        lock.describe(http="127.0.0.1:1234")
        result = try_lock_in_another_process(tmp_path)
        assert result.returncode == 1
        assert f"locked by process {os.getpid()} (adrap watch)" in result.stdout
        assert "ADRAP_STATE_DIR" in result.stdout
        holder = read_holder(tmp_path)
        assert holder == {"pid": os.getpid(), "command": "watch", "http": "127.0.0.1:1234"}
    assert read_holder(tmp_path) is None
    assert try_lock_in_another_process(tmp_path).stdout.strip() == "locked"


def test_adding_beside_the_daemon_says_it_applies_the_folder_by_itself(tmp_path: Path) -> None:
    """`adrap add` while `adrap watch` runs: not "stop it first" (the user would stop the
    daemon to do by hand what it does by itself) but what the daemon does with the file."""
    with state_lock(tmp_path, "watch"):
        for command in ("add", "remove"):
            with pytest.raises(LockedError) as caught, state_lock(tmp_path, command):
                pass
            said = str(caught.value)
            assert "(adrap watch)" in said
            assert "applies what changes in its folder by itself" in said
            assert "stop it first" not in said
        with pytest.raises(LockedError, match="stop it first"), state_lock(tmp_path, "rebuild"):
            pass


def test_the_lock_is_also_exclusive_within_a_process(tmp_path: Path) -> None:
    with (
        state_lock(tmp_path, "build"),
        pytest.raises(LockedError, match="adrap build"),
        state_lock(tmp_path, "add"),
    ):
        pass


def test_an_uncreatable_state_dir_is_reported_as_a_lock_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with (
        pytest.raises(LockedError, match="cannot open the lock file"),
        state_lock(blocker / "state", "build"),
    ):
        pass


HOLD_READER = """
import sys, time
from pathlib import Path
from ingestor.service.locking import read_holder, reader_lock
state = Path(sys.argv[1])
with reader_lock(state):
    print("reading", flush=True)
    deadline = time.monotonic() + 60
    while not (read_holder(state) or {}).get("waiting"):  # until the writer says it waits
        assert time.monotonic() < deadline, "no writer came to wait"
        time.sleep(0.02)
    (state / "released").write_text("")  # the last thing done under the shared lock
"""


def test_a_writer_waits_for_a_reader_instead_of_failing(tmp_path: Path) -> None:
    """A query holding the store while the daemon starts delays the daemon; it never kills it."""
    with state_lock(tmp_path, "build"):
        pass  # a writer ran once: the lock file exists
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_READER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as reader:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "reading"
        with state_lock(tmp_path, "watch", reader_wait=30) as lock:
            assert (tmp_path / "released").exists(), "the writer got the lock before the reader"
            assert lock.info["command"] == "watch"
        assert reader.wait(30) == 0


def test_a_reader_is_refused_while_a_writer_holds_the_lock_and_creates_nothing(
    tmp_path: Path,
) -> None:
    from ingestor.service.locking import WriterActiveError, reader_lock

    empty = tmp_path / "never"
    with reader_lock(empty):
        pass
    assert not empty.exists(), "a reader creates no state dir and no lock file"
    with (
        state_lock(tmp_path, "watch"),
        pytest.raises(WriterActiveError, match="adrap watch"),
        reader_lock(tmp_path),
    ):
        pass


def test_read_only_commands_create_nothing_in_an_empty_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from ingestor.cli import main

    monkeypatch.chdir(tmp_path)
    for args in (["status"], ["config"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == []
