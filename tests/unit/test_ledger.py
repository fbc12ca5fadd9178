"""JsonLedger (ingestor/ledger.py): the JSON file behind unread.json and quarantine.json."""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from ingestor.ledger import JsonLedger
from ingestor.pipeline.unread import Unread, UnreadFile
from ingestor.service.failures import Quarantine, Quarantined, read_quarantine


@dataclass(frozen=True)
class Entry:
    reason: str
    size: int = -1


def test_a_missing_file_is_an_empty_ledger_and_is_not_created(tmp_path: Path) -> None:
    ledger = JsonLedger(tmp_path / "x.json", Entry)
    assert ledger.load() == {}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "text",
    [
        "{not json",  # cut short or garbled
        '{"a.txt": {"reason": "r", "colour": "red"}}',  # a field the entry does not have
        '{"a.txt": "r"}',  # an entry that is not an object
        "[]",  # JSON, but not an object (it stopped the daemon at start)
        "\udcff",  # bytes that are not UTF-8
    ],
)
def test_a_corrupt_file_is_ignored_and_logged(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with caplog.at_level(logging.WARNING):
        assert JsonLedger(path, Entry, what="thing").load() == {}
    assert f"ignored the unreadable thing {path}" in caplog.text
    assert path.exists()  # kept for a look; the next save replaces it


def test_an_unreadable_file_is_ignored_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "x.json"
    path.mkdir()  # reading it raises IsADirectoryError, an OSError
    with caplog.at_level(logging.WARNING):
        assert JsonLedger(path, Entry).load() == {}
    assert "ignored the unreadable ledger" in caplog.text


def test_a_round_trip_keeps_every_entry(tmp_path: Path) -> None:
    ledger = JsonLedger(tmp_path / "x.json", Entry)
    items = {"b/c.txt": Entry("r1", 3), "a.txt": Entry("r2")}
    ledger.save(items)
    assert ledger.load() == items
    text = (tmp_path / "x.json").read_text(encoding="utf-8")
    assert text == json.dumps(
        {"a.txt": {"reason": "r2", "size": -1}, "b/c.txt": {"reason": "r1", "size": 3}}, indent=1
    )  # sorted by source, one field a line


def test_a_save_leaves_no_temp_file_and_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    old = os.umask(0)
    try:
        JsonLedger(path, Entry).save({"a.txt": Entry("r")})
        JsonLedger(path, Entry).save({"b.txt": Entry("r")})  # over an existing file
    finally:
        os.umask(old)
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_save_keeps_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.json"
    ledger = JsonLedger(path, Entry)
    ledger.save({"a.txt": Entry("old")})

    def fail(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        ledger.save({"a.txt": Entry("new")})
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    assert ledger.load() == {"a.txt": Entry("old")}


def test_no_path_keeps_the_ledger_in_memory(tmp_path: Path) -> None:
    ledger: JsonLedger[Entry] = JsonLedger(None, Entry)
    assert ledger.load() == {}
    ledger.save({"a.txt": Entry("r")})  # nothing to write, nothing raised
    assert list(tmp_path.iterdir()) == []


# -- the two ledgers: files written in today's format still load --------------------------------

#: unread.json as adrap writes it today (json.dumps(..., indent=1), sorted by source); the second
#: entry lacks next_try and inode, as an older version wrote it.
UNREAD_TODAY = """{
 "docs/": {
  "kind": "stale",
  "reason": "the folder docs/ cannot be listed (Permission denied)",
  "since": 1700000000.5,
  "kept": true,
  "size": -1,
  "mtime_ns": -1,
  "attempts": 3,
  "next_try": 1700000040.5,
  "inode": -1
 },
 "empty.pdf": {
  "kind": "skipped",
  "reason": "empty.pdf is empty",
  "since": 1700000001.0,
  "kept": false,
  "size": 0,
  "mtime_ns": 1699999999000000000,
  "attempts": 1
 }
}"""

QUARANTINE_TODAY = """{
 "big.txt": {
  "reason": "endpoint returned 400",
  "size": 1234,
  "mtime_ns": 1699999999000000000,
  "at": 1700000002.25
 }
}"""


def test_an_unread_json_of_today_loads_and_is_written_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "unread.json"
    path.write_text(UNREAD_TODAY, encoding="utf-8")
    unread = Unread(path, clock=lambda: 1700000010.0)
    assert unread.items() == {
        "docs/": UnreadFile(
            "stale", "the folder docs/ cannot be listed (Permission denied)", 1700000000.5,
            True, -1, -1, 3, 1700000040.5, -1,
        ),
        "empty.pdf": UnreadFile(
            "skipped", "empty.pdf is empty", 1700000001.0, False, 0, 1699999999000000000, 1
        ),
    }  # fmt: skip
    assert unread.counts() == {"skipped": 1, "stale": 1}
    unread.clear("gone.txt")  # not there: nothing to write
    unread.note("new.txt", "skipped", "new.txt is empty", None, kept=False)
    unread.clear("new.txt")
    unread.flush()
    written = json.loads(path.read_text(encoding="utf-8"))
    today = json.loads(UNREAD_TODAY)
    today["empty.pdf"] |= {"next_try": 0.0, "inode": -1}  # the defaults, now spelt out
    for entry in today.values():
        entry["settings"] = ""  # the read settings they failed under: unknown then
    assert written == today
    assert Unread(path).items() == unread.items()


def test_a_file_skipped_under_other_read_settings_is_not_known_to_fail(tmp_path: Path) -> None:
    unread = Unread(tmp_path / "unread.json")
    st = (tmp_path / "unread.json").parent.stat()
    unread.settings = "limit 1000"
    unread.note("big.txt", "skipped", "big.txt is too large", st, kept=False)
    assert unread.known("big.txt", st) is not None, "the same version, the same settings"
    unread.settings = "limit 100000"
    assert unread.known("big.txt", st) is None, "read again under the new settings"
    unread.flush()
    legacy = Unread(tmp_path / "unread.json")  # a process that set no settings: ""
    assert legacy.known("big.txt", st) is None


def test_a_quarantine_json_of_today_loads_and_is_written_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "quarantine.json"
    path.write_text(QUARANTINE_TODAY, encoding="utf-8")
    expected = {
        "big.txt": Quarantined("endpoint returned 400", 1234, 1699999999000000000, 1700000002.25)
    }
    assert Quarantine(path).items() == expected
    assert read_quarantine(path) == expected
    quarantine = Quarantine(path)
    (tmp_path / "bad.txt").write_text("x")
    quarantine.add("bad.txt", tmp_path / "bad.txt", "endpoint returned 422")
    assert quarantine.release("bad.txt") == ["bad.txt"]
    assert path.read_text(encoding="utf-8") == QUARANTINE_TODAY
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_corrupt_quarantine_is_logged_as_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    quarantine, unread = tmp_path / "quarantine.json", tmp_path / "unread.json"
    quarantine.write_text("{", encoding="utf-8")
    unread.write_text("[", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert len(Quarantine(quarantine)) == 0
        assert len(Unread(unread)) == 0
    assert f"ignored the unreadable quarantine file {quarantine}" in caplog.text
    assert f"ignored the unreadable ledger {unread}" in caplog.text
