"""Reading: formats, normalisation, the folder walk, and one clear error per unreadable file."""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingestor.errors import SourceError
from ingestor.read import formats
from ingestor.read.documents import (
    SUPPORTED_SUFFIXES,
    Document,
    iter_documents,
    normalise_text,
    read_document,
)
from ingestor.read.listing import DEFAULT_IGNORE

MAX = 1_000_000


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def make_pdf(text: str | None) -> bytes:
    """Return a minimal valid one-page PDF, with ``text`` in its text layer (none if None)."""
    content = b"" if text is None else f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n%b\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%b\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


def read_error(path: Path, root: Path, max_bytes: int = MAX) -> str:
    with pytest.raises(SourceError) as info:
        read_document(path, root, max_bytes=max_bytes)
    message = str(info.value)
    assert "\n" not in message
    return message


# Documents ---------------------------------------------------------------------------------------


def test_text_file_becomes_a_document_with_relative_source_and_raw_hash(tmp_path: Path) -> None:
    raw = b"Title\r\n\r\n\r\nFirst line  \r\nsecond line.\r\n"
    path = write(tmp_path / "notes" / "a.txt", raw)
    doc = read_document(path, tmp_path, max_bytes=MAX)
    assert doc == Document(
        source="notes/a.txt",
        text="Title\n\nFirst line\nsecond line.",
        content_hash=hashlib.sha256(raw).hexdigest(),
        size=len(raw),
        mtime=path.stat().st_mtime,
        mtime_ns=0,  # written just now: racily clean, read again next time (see below)
        inode=path.stat().st_ino,
        encoding="utf-8",
    )


def test_a_file_modified_within_the_coarse_mtime_granularity_is_not_trusted_by_stat(
    tmp_path: Path,
) -> None:
    """On SMB or FAT (2 s mtimes) a file saved twice in two seconds can keep its size and mtime:
    its entry says "read it again" (mtime_ns 0) until its mtime is older than the granularity."""
    path = write(tmp_path / "a.txt", b"Some text.")
    assert read_document(path, tmp_path, max_bytes=MAX).mtime_ns == 0
    old = time.time() - 60
    os.utime(path, (old, old))
    assert read_document(path, tmp_path, max_bytes=MAX).mtime_ns == path.stat().st_mtime_ns != 0


def test_utf8_bom_is_dropped_and_utf16_with_bom_is_decoded(tmp_path: Path) -> None:
    utf8 = write(tmp_path / "bom.md", codecs.BOM_UTF8 + "Café ☕".encode())
    utf16 = write(tmp_path / "wide.txt", "Grüße aus Köln".encode("utf-16"))  # writes a BOM
    assert read_document(utf8, tmp_path, max_bytes=MAX).text == "Café ☕"
    assert read_document(utf16, tmp_path, max_bytes=MAX).text == "Grüße aus Köln"


def test_symlink_inside_the_root_is_read_under_its_own_name(tmp_path: Path) -> None:
    write(tmp_path / "real.txt", "Real text.")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    doc = read_document(tmp_path / "link.txt", tmp_path, max_bytes=MAX)
    assert (doc.source, doc.text) == ("link.txt", "Real text.")


def test_html_keeps_visible_text_as_paragraphs(tmp_path: Path) -> None:
    html = """<!DOCTYPE html><html><head><title>Tab title</title>
    <style>p { color: red }</style><script>var x = "<p>not text</p>";</script></head>
    <body><h1>The   Fox &amp; the Grapes</h1>
    <p>A fox saw
       some grapes&nbsp;&mdash; &quot;sour&quot;, he said.</p><noscript>Enable JS</noscript>
    <ul><li>one</li><li>two</li></ul><p>line one<br>line two</p>
    <table><tr><td>a</td><td>b</td></tr></table><pre>  keep
    spacing</pre></body></html>"""
    path = write(tmp_path / "fox.html", html)
    assert read_document(path, tmp_path, max_bytes=MAX).text == (
        "The Fox & the Grapes\n\n"
        'A fox saw some grapes \u2014 "sour", he said.\n\n'
        "one\n\ntwo\n\n"
        "line one\nline two\n\n"
        "a b\n\n"
        "  keep\n    spacing"
    )


def test_html_declaring_a_legacy_charset_is_decoded_with_it(tmp_path: Path) -> None:
    html = '<html><head><meta charset="windows-1252"></head><body><p>caf\xe9 \x93quoted\x94</p>'
    path = write(tmp_path / "old.htm", html.encode("latin-1"))
    assert read_document(path, tmp_path, max_bytes=MAX).text == "café \u201cquoted\u201d"


def test_pdf_text_layer_is_read(tmp_path: Path) -> None:
    path = write(tmp_path / "doc.pdf", make_pdf("Hello from a PDF"))
    assert read_document(path, tmp_path, max_bytes=MAX).text == "Hello from a PDF"


# Errors: each names the file, the reason and the fix ---------------------------------------------


def test_unsupported_suffix_is_refused(tmp_path: Path) -> None:
    message = read_error(write(tmp_path / "movie.xyz", "text"), tmp_path)
    assert "movie.xyz" in message
    assert "unsupported" in message
    assert "ADRAP_READ__TEXT_SUFFIXES" in message  # the way to read it if it is text


def test_an_extra_text_suffix_is_read_as_plain_text(tmp_path: Path) -> None:
    path = write(tmp_path / "schema.sql", "SELECT 1;")
    assert read_document(path, tmp_path, max_bytes=MAX, text_suffixes=[".sql"]).text == "SELECT 1;"
    assert read_document(path, tmp_path, max_bytes=MAX, text_suffixes=["SQL"]).text == "SELECT 1;"


def test_file_over_the_size_limit_names_size_limit_and_setting(tmp_path: Path) -> None:
    message = read_error(write(tmp_path / "big.txt", "x" * 2000), tmp_path, max_bytes=1000)
    assert "big.txt" in message
    assert "2,000 bytes" in message
    assert "1,000" in message
    assert "ADRAP_READ__MAX_FILE_BYTES" in message


@pytest.mark.parametrize("content", [b"", b"  \n\t\r\n  "])
def test_empty_or_whitespace_only_file_is_refused(tmp_path: Path, content: bytes) -> None:
    message = read_error(write(tmp_path / "blank.txt", content), tmp_path)
    assert "blank.txt" in message
    assert "no text" in message


def test_nul_bytes_in_a_text_file_mean_binary(tmp_path: Path) -> None:
    message = read_error(write(tmp_path / "image.txt", b"\x89PNG\x00\x00\x01"), tmp_path)
    assert "image.txt" in message
    assert "binary" in message


def test_text_that_is_not_utf8_is_decoded_as_its_detected_legacy_encoding(tmp_path: Path) -> None:
    path = write(tmp_path / "legacy.txt", "caf\xe9 \u201cquoted\u201d".encode("cp1252"))
    assert read_document(path, tmp_path, max_bytes=MAX).text == "caf\xe9 \u201cquoted\u201d"


def test_permission_denied_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "secret.txt", "text")
    real_open = os.open

    def deny(file: str | Path, flags: int, *args: int, **kw: int) -> int:
        if Path(file).name == path.name:  # opened by name, relative to its folder's descriptor
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, flags, *args, **kw)

    # chmod 000 does not stop root, which runs these tests in containers
    monkeypatch.setattr(os, "open", deny)
    message = read_error(path, tmp_path)
    assert "secret.txt" in message
    assert "permission denied" in message


def test_file_that_vanished_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "vanished" in read_error(tmp_path / "gone.txt", tmp_path)
    path = write(tmp_path / "racy.txt", "text")
    real_open = os.open

    def delete_first(file: str | Path, flags: int, *args: int, **kw: int) -> int:
        if Path(file).name == path.name:  # opened by name, relative to its folder's descriptor
            path.unlink()  # deleted between the checks and the read
        return real_open(file, flags, *args, **kw)

    monkeypatch.setattr(os, "open", delete_first)
    message = read_error(path, tmp_path)
    assert "racy.txt" in message
    assert "vanished" in message


def test_symlink_leading_out_of_the_root_is_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    write(tmp_path / "outside.txt", "private")
    (root / "escape.txt").symlink_to(tmp_path / "outside.txt")
    message = read_error(root / "escape.txt", root)
    assert "escape.txt" in message
    assert "outside the root" in message


def test_broken_symlink_is_reported(tmp_path: Path) -> None:
    (tmp_path / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    message = read_error(tmp_path / "dangling.md", tmp_path)
    assert "dangling.md" in message
    assert "broken symlink" in message


def test_file_outside_the_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    message = read_error(write(tmp_path / "elsewhere.txt", "text"), tmp_path / "root")
    assert "elsewhere.txt" in message
    assert "not inside the root" in message


def test_directory_and_fifo_are_not_regular_files(tmp_path: Path) -> None:
    (tmp_path / "folder.txt").mkdir()
    os.mkfifo(tmp_path / "pipe.txt")  # opening it for reading would block without the stat check
    assert "is a folder, not a regular file" in read_error(tmp_path / "folder.txt", tmp_path)
    assert "is a named pipe, not a regular file" in read_error(tmp_path / "pipe.txt", tmp_path)


def test_a_pipe_socket_or_bad_link_without_a_suffix_says_what_it_is_not_its_suffix(
    tmp_path: Path,
) -> None:
    """A share's FIFO, socket or bad link named without a suffix was refused as "unsupported
    type '(no suffix)'": its name's fault, the fix offered adding a text suffix."""
    root = tmp_path / "root"
    root.mkdir()
    write(tmp_path / "secret", "outside")
    os.mkfifo(root / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "sock"))
        (root / "escape").symlink_to(tmp_path / "secret")
        (root / "dangling").symlink_to(root / "nowhere")
        (root / "loop1").symlink_to(root / "loop2")
        (root / "loop2").symlink_to(root / "loop1")
        write(root / "notes", "plain text with no suffix")
        (root / "inner").symlink_to(root / "notes")
        assert "is a named pipe, not a regular file" in read_error(root / "fifo", root)
        assert "is a socket, not a regular file" in read_error(root / "sock", root)
        assert "outside the root" in read_error(root / "escape", root)
        assert "broken symlink" in read_error(root / "dangling", root)
        assert "link that loops" in read_error(root / "loop1", root)
        for name in ("notes", "inner"):  # a file, or a link to one inside: the suffix's refusal
            assert "unsupported type '(no suffix)'" in read_error(root / name, root)


def test_pdf_without_a_text_layer_asks_for_ocr(tmp_path: Path) -> None:
    message = read_error(write(tmp_path / "scan.pdf", make_pdf(None)), tmp_path)
    assert "scan.pdf" in message
    assert "no text layer" in message


def test_encrypted_pdf_asks_for_an_unencrypted_copy(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=100, height=100)
    writer.encrypt(user_password="secret", algorithm="RC4-128")  # RC4 needs no extra package
    buffer = io.BytesIO()
    writer.write(buffer)
    message = read_error(write(tmp_path / "locked.pdf", buffer.getvalue()), tmp_path)
    assert "locked.pdf" in message
    assert "encrypted" in message


@pytest.mark.parametrize("content", [b"%PDF-1.4\n1 0 obj\n<< /Broken", b"not a pdf at all", b""])
def test_corrupt_pdf_is_a_source_error(tmp_path: Path, content: bytes) -> None:
    message = read_error(write(tmp_path / "broken.pdf", content), tmp_path)
    assert "broken.pdf" in message


def test_non_positive_max_bytes_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        read_document(write(tmp_path / "a.txt", "text"), tmp_path, max_bytes=0)


# normalise_text ----------------------------------------------------------------------------------


def test_normalise_text_keeps_one_blank_line_between_paragraphs() -> None:
    text = "\n\n  Intro  \r\nstill intro\t\r\r\r\n \n\nNext\x00 para\fPage two\n\n\n"
    assert normalise_text(text) == "Intro\nstill intro\n\nNext para\n\nPage two"


@given(st.text(alphabet=st.sampled_from(list("ab \t\r\n\x00\f\v\u2028\u2029\x85"))) | st.text())
def test_normalise_text_is_idempotent_and_canonical(text: str) -> None:
    once = normalise_text(text)
    assert normalise_text(once) == once
    assert "\r" not in once
    assert "\x00" not in once
    assert "\n\n\n" not in once
    assert once == once.strip()
    assert all(line == line.rstrip() for line in once.split("\n"))


# iter_documents ----------------------------------------------------------------------------------


def walk(root: Path, **kwargs: object) -> list[tuple[str, str]]:
    """Return ``(path relative to root, "ok" or the error)`` for each item the walk yields."""
    out = []
    for path, item in iter_documents(root, max_bytes=MAX, **kwargs):  # type: ignore[arg-type]
        rel = path.relative_to(root).as_posix() if path != root else path.name
        out.append((rel, "ok" if isinstance(item, Document) else str(item)))
    return out


def test_walk_is_sorted_skips_ignored_files_and_reports_the_rest(tmp_path: Path) -> None:
    for name in ["b.md", "a/z.txt", "a/y.rst", "c.html", ".git/HEAD.txt", ".hidden.txt",
                 "~$draft.txt", "x.swp", "x.tmp", "dl.txt.part", ".#lock.txt", "backup.txt~",
                 "photo.jpg", "empty.txt"]:  # fmt: skip
        write(tmp_path / name, "<p>Some text.</p>" if name != "empty.txt" else "")
    result = walk(tmp_path)
    assert [rel for rel, _ in result] == [
        "a/y.rst", "a/z.txt", "b.md", "c.html", "empty.txt", "photo.jpg"
    ]  # fmt: skip
    status = dict(result)
    assert status["a/y.rst"] == "ok"
    assert "no text" in status["empty.txt"]
    assert "OCR is off" in status["photo.jpg"]


def test_walk_uses_custom_ignore_patterns(tmp_path: Path) -> None:
    write(tmp_path / "keep.txt", "Keep.")
    write(tmp_path / "drafts" / "skip.txt", "Skip.")
    assert walk(tmp_path, ignore=[*DEFAULT_IGNORE, "drafts"]) == [("keep.txt", "ok")]


def test_walk_enters_no_dir_link_inner_outer_or_loop_and_indexes_each_folder_once(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    write(root / "docs" / "a.txt", "Inside.")
    write(tmp_path / "outside" / "secret.txt", "Private.")
    (root / "alias").symlink_to(root / "docs")
    (root / "escape").symlink_to(tmp_path / "outside")
    (root / "docs" / "loop").symlink_to(root)
    result = dict(walk(root))
    assert result["docs/a.txt"] == "ok"
    assert "indexed under its own name" in result["alias"]  # docs/ is read as docs/, once
    assert "outside the root" in result["escape"]
    assert "loop" in result["docs/loop"]
    assert sorted(result) == ["alias", "docs/a.txt", "docs/loop", "escape"]


def test_walk_accepts_a_single_file_as_root(tmp_path: Path) -> None:
    path = write(tmp_path / "one.md", "# One\n\nText.")
    [(yielded, doc)] = list(iter_documents(path, max_bytes=MAX))
    assert yielded == path
    assert isinstance(doc, Document)
    assert doc.source == "one.md"


def test_walk_of_a_missing_root_raises(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="missing"):
        list(iter_documents(tmp_path / "missing", max_bytes=MAX))


def test_supported_suffixes_are_the_formats_readers_exist_for() -> None:
    assert SUPPORTED_SUFFIXES is formats.SUPPORTED_SUFFIXES
    office = {".docx", ".pptx", ".xlsx", ".xls", ".odt", ".ods", ".odp", ".epub", ".eml", ".msg"}
    plain = {".txt", ".md", ".rst", ".html", ".pdf", ".rtf", ".csv", ".tsv", ".json", ".xml"}
    assert office | plain | {".yaml", ".ics"} <= SUPPORTED_SUFFIXES


def test_a_document_keeps_its_regions_where_each_located_part_starts(tmp_path: Path) -> None:
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf).writerows([["name", "city"], ["Ada", "London"], ["Alan", "Wilmslow"]])
    path = write(tmp_path / "people.csv", buf.getvalue())
    doc = read_document(path, tmp_path, max_bytes=MAX)
    assert [loc for _, loc in doc.regions] == ["row 1", "row 2", "row 3"]
    for offset, loc in doc.regions:
        line = doc.text[offset:].split("\n", 1)[0]
        assert line.startswith("|"), (loc, line)
    assert "Wilmslow" in doc.text[doc.regions[2][0] :]
