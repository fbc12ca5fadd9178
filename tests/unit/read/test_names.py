"""File names that are not valid UTF-8 become text that round-trips, and that every encoder takes."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from ingestor.read.documents import read_document
from ingestor.read.listing import iter_files, source_name, source_path
from ingestor.read.names import fs_name, source_text

NAMES = [
    "plain.txt",
    "café ☕/notes.md",
    os.fsdecode(b"caf\xe9 notes.txt"),  # Latin-1 from an old client
    os.fsdecode(b"\xff\xfe.txt"),
    os.fsdecode(b"dir\xe9/sub\x81/x.txt"),
    "a\\xe9.txt",  # a real backslash before what reads as an escape
    "a\\\\b.txt",
    "end\\",
    "lone \\ backslash.txt",
    os.fsdecode(b"\\\xe9"),  # a backslash before an undecodable byte
]


@pytest.mark.parametrize("name", NAMES)
def test_a_name_becomes_valid_text_that_gives_the_name_back(name: str) -> None:
    text = source_text(name)
    text.encode("utf-8")  # no surrogates left: SQLite, JSON writers and Qdrant take it
    assert fs_name(text) == name
    assert os.fsencode(fs_name(text)) == os.fsencode(name)


def test_valid_names_without_escape_like_backslashes_are_their_own_text() -> None:
    for name in ["plain.txt", "café ☕/notes.md", "lone \\ backslash.txt", "end\\"]:
        assert source_text(name) == name


def test_no_two_names_share_a_text() -> None:
    texts = [source_text(n) for n in NAMES]
    assert len(set(texts)) == len(NAMES)
    assert source_text(os.fsdecode(b"caf\xe9.txt")) == "caf\\xe9.txt"
    assert source_text("caf\\xe9.txt") == "caf\\\\xe9.txt"


def test_the_text_goes_through_sqlite_and_json_unchanged(tmp_path: Path) -> None:
    texts = [source_text(n) for n in NAMES]
    db = sqlite3.connect(tmp_path / "t.sqlite")
    db.execute("create table s (source text)")
    db.executemany("insert into s values (?)", [(t,) for t in texts])
    assert [r[0] for r in db.execute("select source from s order by rowid")] == texts
    assert json.loads(json.dumps(texts, ensure_ascii=False).encode("utf-8")) == texts


def test_a_file_with_an_undecodable_name_is_listed_read_and_found_again(tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + b"/caf\xe9 notes.txt"
    with open(raw, "w") as f:
        f.write("The heron waits by the reed bed.\n")
    [(path, error)] = list(iter_files(tmp_path))
    assert error is None
    source = source_name(path, tmp_path)
    assert source == "caf\\xe9 notes.txt"
    doc = read_document(path, tmp_path, max_bytes=1000)
    assert doc.source == source
    assert os.fsencode(source_path(tmp_path, source)) == raw
