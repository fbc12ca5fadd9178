"""Bombs are refused before they expand (issue 57, items 2 and 4): a few hundred bytes of
spreadsheet or zip that declare billions of cells or gigabytes of members.

Files come from the real writers (openpyxl, python-docx, python-pptx) or, where the writers
cannot make them (an ODF spreadsheet, a member whose header lies), from zipfile. Every reading
that could expand runs in a child process with its address space limited to 1 GiB and a wall
limit, so a reader that still expanded fails the test with a MemoryError or a timeout instead of
taking the machine's memory or hanging the suite; neither limit is a speed or memory assertion.
"""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ingestor.errors import SourceError
from ingestor.read.archive import ZipLimits, open_archive, read_member
from ingestor.read.formats import extract
from testkit.bombs import GIB, cell, declare, make_xlsx, ods, rewrite_member, row, with_member
from testkit.office import make_odf, make_pptx
from tests.unit.read.test_formats import make_docx, make_epub

REPO = Path(__file__).resolve().parents[3]
CHILD = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from ingestor.errors import SourceError
from ingestor.read.formats import extract
name = sys.argv[2]
try:
    parts = extract(sys.stdin.buffer.read(), name, "." + name.rsplit(".", 1)[1]).parts
except SourceError as exc:
    print("refused:", exc)
else:
    print("read:", [(part.text, part.locator) for part in parts])
"""


def read_bounded(data: bytes, name: str, *, memory: int = GIB, seconds: float = 120) -> str:
    """Read ``data`` as ``name`` in a child process held to ``memory`` bytes of address space;
    return what it printed (``read: [(text, locator), ...]`` or ``refused: <message>``)."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(memory), name],
        input=data,
        capture_output=True,
        timeout=seconds,
        cwd=REPO,
        check=False,
    )
    assert child.returncode == 0, child.stderr.decode(errors="replace")[-1500:]
    return child.stdout.decode().strip()


# OpenDocument spreadsheets: repeats counted, not expanded ---------------------------------------


def test_an_ods_of_a_few_hundred_bytes_with_an_empty_cell_repeated_a_billion_times_reads_one_cell() -> (
    None
):
    data = ods(row(cell("heron") + cell(repeat=1_000_000_000)))
    assert len(data) < 714
    assert read_bounded(data, "bomb.ods") == "read: [('# S', 'S'), ('| heron |', 'S!A1')]"


def test_empty_rows_and_cells_repeated_a_billion_times_move_the_next_cell_without_expanding() -> (
    None
):
    data = ods(row(cell(repeat=1_000_000_000), repeat=1_000_000_000) + row(cell("x") + cell("y")))
    assert (
        read_bounded(data, "gap.ods")
        == "read: [('# S', 'S'), ('| x | y |', 'S!A1000000001:B1000000001')]"
    )


def test_a_non_empty_cell_repeated_past_the_last_column_is_refused_naming_the_repeat() -> None:
    out = read_bounded(ods(row(cell("x", repeat=1_000_000_000))), "wide.ods")
    assert out.startswith("refused: 'wide.ods' is refused: S row 1")
    assert "table:number-columns-repeated=1,000,000,000" in out
    assert "16,384 (XFD)" in out


def test_a_cell_placed_past_the_last_column_by_an_empty_repeat_is_refused() -> None:
    out = read_bounded(ods(row(cell("a") + cell(repeat=1_000_000_000) + cell("b"))), "far.ods")
    assert "puts a cell in column 1,000,000,002, past the 16,384 (XFD)" in out


def test_a_non_empty_row_repeated_a_billion_times_is_refused_before_it_is_written_out() -> None:
    out = read_bounded(ods(row(cell("x") + cell("y"), repeat=1_000_000_000)), "tall.ods")
    assert out == (
        "refused: 'tall.ods' is refused: its tables would write out more than 2,000,000 cells "
        "(S row 1 (table:number-rows-repeated=1,000,000,000): 2,000,000,000 cells, 2,000,000 "
        "left); split it or remove it"
    )


def test_a_non_empty_cell_repeated_within_the_limits_is_written_out_as_often_as_repeated() -> None:
    parts = extract(ods(row(cell("0", repeat=3000), repeat=2)), "zeros.ods", ".ods").parts
    assert [p.locator for p in parts] == ["S", "S!A1:DKJ1", "S!A2:DKJ2"]
    assert parts[1].text.count("| 0 ") == 3000  # the old reader stopped at 1,000


def test_a_space_count_of_a_billion_in_a_text_document_is_capped() -> None:
    data = make_odf("<office:text><text:p>a<text:s text:c='1000000000'/>b</text:p></office:text>")
    assert read_bounded(data, "spaces.odt") == f"read: [('a{' ' * 100}b', '')]"


def test_damaged_repeat_and_level_counts_are_read_as_one() -> None:
    data = ods(
        '<table:table-row table:number-rows-repeated="many">'
        '<table:table-cell table:number-columns-repeated="-3"><text:p>x</text:p></table:table-cell>'
        "</table:table-row>"
    )
    assert extract(data, "odd.ods", ".ods").parts[1].text == "| x |"
    odt = make_odf('<office:text><text:h text:outline-level="top">T</text:h></office:text>')
    assert extract(odt, "odd.odt", ".odt").parts[0].text == "# T"


def test_text_nested_too_deeply_to_walk_is_refused_not_a_crash() -> None:
    spans = "<text:span>" * 5000 + "deep" + "</text:span>" * 5000
    data = make_odf(f"<office:text><text:p>{spans}</text:p></office:text>")
    with pytest.raises(SourceError, match="nests its content too deeply"):
        extract(data, "deep.odt", ".odt")


# Excel workbooks: the declared dimension is not trusted ------------------------------------------


def test_an_xlsx_declaring_a1_to_xfd1048576_reads_only_the_cells_it_holds() -> None:
    """A few KB declaring 17 billion cells stalled the daemon for half an hour: every missing
    row up to the last one present was padded to the declared 16,384 columns."""
    data = rewrite_member(
        make_xlsx({1: "heron", 1_048_576: "egret"}),
        "xl/worksheets/sheet1.xml",
        b'<dimension ref="A1:A1048576"/>',
        b'<dimension ref="A1:XFD1048576"/>',
    )
    assert len(data) < 6000
    out = read_bounded(data, "huge.xlsx", seconds=60)
    assert out == (
        "read: [('# Sheet', 'Sheet'), ('| heron |', 'Sheet!A1'), ('| egret |', 'Sheet!A1048576')]"
    )


def test_an_xlsx_row_numbered_near_a_trillion_is_read_without_the_rows_before_it() -> None:
    data = rewrite_member(
        make_xlsx({1: "first", 2: "last"}), "xl/worksheets/sheet1.xml", b'"A2"', b'"A999999999999"'
    )
    data = rewrite_member(data, "xl/worksheets/sheet1.xml", b'r="2"', b'r="999999999999"')
    out = read_bounded(data, "far.xlsx", seconds=60)
    assert out.endswith("('| last |', 'Sheet!A999999999999')]")


def test_an_xlsx_whose_shared_strings_declare_3_gib_is_refused_unread() -> None:
    strings = b'<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"/>'
    data = with_member(make_xlsx({1: "heron"}), "xl/sharedStrings.xml", strings)
    data = declare(data, "xl/sharedStrings.xml", size=3 * GIB)
    with pytest.raises(SourceError) as refused:
        extract(data, "big.xlsx", ".xlsx")
    assert str(refused.value) == (
        "'big.xlsx' is refused unread: its member 'xl/sharedStrings.xml' declares "
        "3,221,225,472 bytes uncompressed, over the limit of 268,435,456 (a zip bomb?); "
        "remove it, or split the document if it is genuine"
    )


# Every zip-based format: members checked before they inflate -----------------------------------

ZIPPED = {
    "plan.docx": (make_docx, "word/document.xml"),
    "talk.pptx": (make_pptx, "ppt/slides/slide1.xml"),
    "budget.xlsx": (lambda: make_xlsx({1: "heron"}), "xl/worksheets/sheet1.xml"),
    "plan.odt": (lambda: make_odf("<office:text/>"), "content.xml"),
    "sheet.ods": (lambda: ods(row(cell("x"))), "content.xml"),
    "birds.epub": (make_epub, "c1.xhtml"),
}


@pytest.mark.parametrize("name", sorted(ZIPPED))
def test_a_member_declaring_3_gib_is_refused_in_every_zip_format(name: str) -> None:
    make, member = ZIPPED[name]
    data = declare(make(), member, size=3 * GIB)
    out = read_bounded(data, name)
    assert out.startswith(f"refused: {name!r} is refused unread: its member {member!r} declares")


@pytest.mark.parametrize("name", ["talk.pptx", "budget.xlsx", "birds.epub"])
def test_a_media_member_inflating_a_thousand_times_is_refused_where_a_library_reads(
    name: str,
) -> None:
    """20 MB of zeros in 20 KB: media count where a library decides what to inflate
    (python-pptx loads every part a slide links)."""
    make, _ = ZIPPED[name]
    data = with_member(make(), "ppt/media/image1.png", bytes(20 * 2**20))
    out = read_bounded(data, name)
    assert "its member 'ppt/media/image1.png' inflates " in out
    assert "bytes to 20,971,520, more than 100 times" in out


@pytest.mark.parametrize("name", ["plan.docx", "plan.odt", "sheet.ods"])
def test_a_member_the_reader_never_opens_is_not_held_against_the_file(name: str) -> None:
    make, _ = ZIPPED[name]
    suffix = "." + name.rsplit(".", 1)[1]
    data = with_member(make(), "media/film.mp4", bytes(20 * 2**20))
    assert extract(data, name, suffix).parts == extract(make(), name, suffix).parts


@pytest.mark.parametrize("name", sorted(ZIPPED))
def test_members_claiming_more_compressed_bytes_than_the_file_holds_are_refused(name: str) -> None:
    make, member = ZIPPED[name]
    data = make()
    out = read_bounded(declare(data, member, packed=2 * len(data)), name)
    assert f"compressed bytes (by {member!r}), more than the file's {len(data):,}" in out


def test_an_encrypted_member_is_refused_with_the_fix_not_a_crash() -> None:
    data = bytearray(make_docx())
    at = data.find(b"PK\x01\x02")
    while at >= 0:  # set the "encrypted" flag of every directory entry
        data[at + 8] |= 0x1
        at = data.find(b"PK\x01\x02", at + 4)
    with pytest.raises(SourceError, match=r"has an encrypted member .*save an unprotected copy"):
        extract(bytes(data), "locked.docx", ".docx")


def test_a_corrupt_compressed_member_is_an_unreadable_file_not_a_crash() -> None:
    data = bytearray(make_docx())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo("word/document.xml")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for k in range(start + 10, start + 40):
        data[k] ^= 0x55
    with pytest.raises(SourceError, match="not a readable Word document"):
        extract(bytes(data), "broken.docx", ".docx")


def test_a_member_whose_header_declares_less_than_it_holds_yields_no_more_than_declared() -> None:
    data = declare(make_docx(), "word/document.xml", size=100)
    with pytest.raises(SourceError, match=r"not a readable Word document .*CRC"):
        extract(data, "liar.docx", ".docx")


def test_the_guard_counts_members_and_their_total_before_reading_any() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for k in range(12):
            archive.writestr(f"part{k}.xml", "<x/>" * 1000)
    data = buffer.getvalue()
    with pytest.raises(
        SourceError, match="its zip directory lists 12 members, over the limit of 10"
    ):
        open_archive(data, "many.docx", "Word document", ZipLimits(max_members=10))
    with pytest.raises(SourceError, match=r"40,000 bytes uncompressed in all \(44,000 by 'part10"):
        open_archive(data, "many.docx", "Word document", ZipLimits(max_total_bytes=40_000))
    limits = ZipLimits(max_member_bytes=3000)
    with pytest.raises(SourceError, match=r"'part0\.xml' declares 4,000 bytes"):
        open_archive(data, "big.docx", "Word document", limits)
    liar = declare(data, "part0.xml", size=10)
    with (
        zipfile.ZipFile(io.BytesIO(liar)) as archive,
        pytest.raises(SourceError, match=r"not a readable Word document .*CRC"),
    ):
        read_member(archive, "part0.xml", "liar.docx", "Word document", limits)


# Text formats: bounds that exist already -------------------------------------------------------


def test_a_csv_field_over_128_kib_is_refused_with_the_fix() -> None:
    data = b'a,"' + b"x" * (200 * 1024) + b'"\n'
    with pytest.raises(SourceError, match=r"field larger than field limit .*rename it to \.txt"):
        extract(data, "wide.csv", ".csv")
