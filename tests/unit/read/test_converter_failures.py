"""A converter that fails on a file's content fails that file, never the build: a mail nested 3,000
multiparts deep made the standard library's parser recurse past Python's stack, and the
RecursionError stopped `adrap build` (and a daemon's first build, so its restarts) over a share
holding one 150 KB `.eml`; any converter's unexpected error did the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestor.errors import SourceError
from ingestor.read import formats
from ingestor.read.documents import read_document
from testkit.corpus import make_pipeline

NOTE = "A normal note about the garden meeting on Tuesday and the new bench by the pond.\n"


def deep_mail(levels: int) -> str:
    head = "From: a@example.org\nTo: b@example.org\nSubject: deep\nMIME-Version: 1.0\n"
    opened = "".join(
        f'Content-Type: multipart/mixed; boundary="b{i}"\n\n--b{i}\n' for i in range(levels)
    )
    closed = "".join(f"--b{i}--\n" for i in reversed(range(levels)))
    return head + opened + "Content-Type: text/plain\n\nhello from the bottom\n" + closed


def test_a_mail_nested_past_the_stack_is_skipped_and_the_rest_is_built(tmp_path: Path) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "deep.eml").write_text(deep_mail(3000))
    (root / "note.txt").write_text(NOTE)
    p = make_pipeline(tmp_path)
    try:
        report = p.build(root)
        assert sorted(p.require_state().sources) == ["note.txt"]
        (skip,) = report.skipped
        assert "deep.eml" in str(skip)
        assert "nests deeper than its .eml reader can follow" in str(skip)
    finally:
        p.context.store.close()


def test_a_converters_unexpected_error_is_the_files_skip_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(data: bytes, name: str, ocr: bool, depth: int) -> formats.Extracted:
        raise IndexError("list index out of range")

    monkeypatch.setitem(formats._READERS, ".rtf", broken)
    (tmp_path / "odd.rtf").write_text("{\\rtf1 odd}")
    with pytest.raises(SourceError, match=r"its \.rtf reader failed \(IndexError: list index"):
        read_document(tmp_path / "odd.rtf", tmp_path, max_bytes=10**6)
