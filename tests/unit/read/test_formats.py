"""Formats: each one generated with a real library, read back with its structure and locators."""

from __future__ import annotations

import codecs
import io
import json
import shutil
import zipfile
from email.message import EmailMessage

import pytest

from ingestor.errors import SourceError
from ingestor.read.formats import (
    IMAGE_SUFFIXES,
    SUPPORTED_SUFFIXES,
    Extracted,
    Part,
    extract,
    extract_text,
)
from ingestor.read.parts import cell_range, join_parts, table_row
from testkit.office import FACT, make_odf, make_pptx


def error(data: bytes, name: str, *, ocr: bool = False) -> str:
    """Return the one-line SourceError message reading ``name`` raises."""
    suffix = "." + name.rsplit(".", 1)[1]
    with pytest.raises(SourceError) as info:
        extract(data, name, suffix, ocr=ocr)
    message = str(info.value)
    assert "\n" not in message
    assert repr(name) in message
    return message


def located(extracted: Extracted) -> dict[str, str]:
    return {part.locator: part.text for part in extracted.parts}


# Office Open XML ---------------------------------------------------------------------------------


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Budget 2025", 1)
    document.add_paragraph(FACT + ".")
    document.add_heading("Details", 2)
    document.add_paragraph("first item", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for (row, col), text in {
        (0, 0): "Item",
        (0, 1): "Cost",
        (1, 0): "lock_gate",
        (1, 1): "12",
    }.items():
        table.cell(row, col).text = text
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_docx_gives_headings_paragraphs_bullets_and_one_line_table_rows() -> None:
    extracted = extract(make_docx(), "plan.docx", ".docx")
    text = join_parts(extracted.parts)
    assert extracted.encoding is None
    assert "# Budget 2025\n\n" + FACT in text
    assert "## Details" in text
    assert "- first item" in text
    assert "| Item | Cost |\n| lock_gate | 12 |" in text  # no separator line, no escapes
    assert "---" not in text


def test_pptx_gives_one_part_per_slide_with_title_and_speaker_notes() -> None:
    parts = located(extract(make_pptx(), "talk.pptx", ".pptx"))
    assert list(parts) == ["slide 1", "slide 2"]
    assert parts["slide 2"].startswith("# Herons\n" + FACT)
    assert "Say it slowly" in parts["slide 2"]
    assert "<!--" not in parts["slide 1"]


def make_xlsx() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Budget"
    sheet.append(["Item", "Cost"])
    sheet.append([])
    sheet.append([None, "Lock gate", 12.0, FACT])
    other = book.create_sheet("Q3 plan")
    other["B2"] = "heron"
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def test_xlsx_gives_a_heading_per_sheet_and_one_located_row_per_part() -> None:
    parts = extract(make_xlsx(), "budget.xlsx", ".xlsx").parts
    assert parts == (
        Part("# Budget", "Budget"),
        Part("| Item | Cost |", "Budget!A1:B1"),
        Part(f"| Lock gate | 12 | {FACT} |", "Budget!B3:D3", continues=True),
        Part("# Q3 plan", "'Q3 plan'"),
        Part("| heron |", "'Q3 plan'!B2"),
    )
    assert extract_text(make_xlsx(), "budget.xlsx", ".xlsx").startswith(
        "# Budget\n\n| Item | Cost |\n| Lock gate"
    )


# OpenDocument (written by hand: a zip with content.xml, as LibreOffice lays it out) -------------


def test_odt_gives_headings_by_level_lists_and_table_rows() -> None:
    odt = make_odf(
        "<office:text>"
        '<text:h text:outline-level="1">Budget</text:h>'
        f"<text:p>{FACT}<text:s text:c='2'/>again</text:p>"
        '<text:h text:outline-level="2">Items</text:h>'
        "<text:list><text:list-item><text:p>first</text:p></text:list-item>"
        "<text:list-item><text:p>second</text:p></text:list-item></text:list>"
        "<table:table><table:table-row><table:table-cell><text:p>Item</text:p></table:table-cell>"
        "<table:table-cell><text:p>Cost</text:p></table:table-cell></table:table-row>"
        "<table:table-row><table:table-cell><text:p>gate</text:p></table:table-cell>"
        "<table:table-cell><text:p>12</text:p></table:table-cell></table:table-row></table:table>"
        "</office:text>"
    )
    assert extract_text(odt, "plan.odt", ".odt") == (
        f"# Budget\n\n{FACT}  again\n\n## Items\n\n- first\n- second\n\n| Item | Cost |\n| gate | 12 |"
    )


def test_ods_gives_sheets_and_rows_with_cell_ranges_despite_repeated_cells() -> None:
    ods = make_odf(
        '<office:spreadsheet><table:table table:name="Q3 plan">'
        '<table:table-row><table:table-cell table:number-columns-repeated="2"/>'
        f"<table:table-cell><text:p>{FACT}</text:p></table:table-cell>"
        '<table:table-cell table:number-columns-repeated="16000"/></table:table-row>'
        '<table:table-row table:number-rows-repeated="1048570"><table:table-cell/></table:table-row>'
        "</table:table></office:spreadsheet>"
    )
    assert extract(ods, "plan.ods", ".ods").parts == (
        Part("# Q3 plan", "'Q3 plan'"),
        Part(f"| {FACT} |", "'Q3 plan'!C1"),
    )


def test_odp_gives_one_part_per_slide_with_title_and_notes() -> None:
    frame = (
        '<draw:frame presentation:class="{}"><draw:text-box><text:p>{}</text:p>'
        "</draw:text-box></draw:frame>"
    )
    odp = make_odf(
        "<office:presentation>"
        f"<draw:page>{frame.format('title', 'Intro')}</draw:page>"
        f"<draw:page>{frame.format('title', 'Herons')}{frame.format('outline', FACT)}"
        f"<presentation:notes>{frame.format('notes', 'Say it slowly')}</presentation:notes>"
        "</draw:page></office:presentation>"
    )
    parts = located(extract(odp, "talk.odp", ".odp"))
    assert parts == {
        "slide 1": "# Intro",
        "slide 2": f"# Herons\n\n{FACT}\n\n### Notes:\nSay it slowly",
    }


def test_password_protected_odf_is_refused_with_the_fix() -> None:
    odt = make_odf("<office:text/>", manifest="<manifest><encryption-data/></manifest>")
    assert "password-protected" in error(odt, "secret.odt")


# E-books, notebooks, RTF -------------------------------------------------------------------------


def make_epub() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"'
            ' version="1.0"><rootfiles><rootfile full-path="content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        archive.writestr(
            "content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Birds</dc:title>'
            '</metadata><manifest><item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
            '</manifest><spine><itemref idref="c1"/></spine></package>',
        )
        archive.writestr(
            "c1.xhtml",
            f"<html><body><h1>Herons</h1><p>{FACT}.</p><img src='x.png'/></body></html>",
        )
    return buffer.getvalue()


def test_epub_gives_its_chapters_with_headings_and_no_image_placeholders() -> None:
    text = extract_text(make_epub(), "birds.epub", ".epub")
    assert "# Herons" in text
    assert FACT in text
    assert "![" not in text


def test_ipynb_gives_markdown_and_code_cells() -> None:
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Herons\n", FACT]},
            {"cell_type": "code", "metadata": {}, "source": ["print(1)"], "outputs": []},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    text = extract_text(json.dumps(notebook).encode(), "birds.ipynb", ".ipynb")
    assert f"# Herons\n{FACT}" in text
    assert "print(1)" in text


def test_rtf_gives_its_text_in_its_code_page() -> None:
    rtf = rb"{\rtf1\ansi\ansicpg1252{\fonttbl\f0 Arial;}\f0 Caf\'e9: " + FACT.encode() + rb"\par}"
    assert extract_text(rtf, "note.rtf", ".rtf").strip() == f"Café: {FACT}"


# Corrupt, truncated and protected files: one line each -------------------------------------------


@pytest.mark.parametrize(
    "name", ["plan.docx", "talk.pptx", "budget.xlsx", "plan.odt", "birds.epub", "mail.msg"]
)
def test_corrupt_or_truncated_office_files_are_one_line_errors(name: str) -> None:
    assert "not a readable" in error(b"PK\x03\x04 truncated", name)
    assert "not a readable" in error(b"", name)


def test_truncated_docx_is_an_error_naming_the_file() -> None:
    error(make_docx()[:2000], "plan.docx")


def test_invalid_ipynb_and_rtf_are_errors() -> None:
    assert "not a readable Jupyter notebook" in error(b"{not json", "birds.ipynb")
    assert "not RTF" in error(b"plain words", "note.rtf")


@pytest.mark.parametrize("name", ["plan.docx", "talk.pptx", "budget.xlsx"])
def test_password_protected_office_file_is_refused_with_the_fix(name: str) -> None:
    encrypted = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(
        504
    )  # an OLE container, as Office writes
    assert "password-protected; save an unprotected copy" in error(encrypted, name)


# Mail --------------------------------------------------------------------------------------------


def make_eml(*, html: bool = False, attachments: tuple[tuple[str, bytes], ...] = ()) -> bytes:
    message = EmailMessage()
    message["Subject"] = "Heron   survey"
    message["From"] = "Ann <ann@example.org>"
    message["To"] = "bob@example.org"
    message["Date"] = "Mon, 03 Mar 2025 10:00:00 +0000"
    if html:
        message.set_content(
            f"<html><body><p>{FACT}</p><script>x</script></body></html>", subtype="html"
        )
    else:
        message.set_content(FACT + ".\n")
    for filename, data in attachments:
        message.add_attachment(
            data, maintype="application", subtype="octet-stream", filename=filename
        )
    return message.as_bytes()


def test_eml_gives_header_body_and_readable_attachments_with_their_locators() -> None:
    from tests.unit.read.test_documents import make_pdf

    eml = make_eml(
        attachments=(("report.pdf", make_pdf("Locks open at dawn")), ("photo.bin", b"\x00\x01"))
    )
    parts = extract(eml, "survey.eml", ".eml").parts
    assert parts[0] == Part(
        "# Heron survey\nFrom: Ann <ann@example.org>\nTo: bob@example.org\n"
        "Date: Mon, 03 Mar 2025 10:00:00 +0000",
        "header",
    )
    assert parts[1] == Part(FACT + ".", "body")
    assert parts[2] == Part("Locks open at dawn", "attachment report.pdf, page 1")
    assert len(parts) == 3  # the unsupported attachment is skipped, not an error


def test_eml_with_only_an_html_body_gives_its_visible_text() -> None:
    assert located(extract(make_eml(html=True), "survey.eml", ".eml"))["body"] == FACT


def test_eml_nested_in_eml_is_read_to_a_bounded_depth() -> None:
    eml = make_eml()
    for _ in range(5):
        eml = make_eml(attachments=(("inner.eml", eml),))
    locators = [part.locator for part in extract(eml, "deep.eml", ".eml").parts]
    assert "attachment inner.eml, attachment inner.eml, body" in locators
    assert max(locator.count("attachment") for locator in locators) == 2


# Text in any encoding ----------------------------------------------------------------------------


def test_utf8_text_reports_its_encoding() -> None:
    extracted = extract("naïve café".encode(), "a.txt", ".txt")
    assert extracted == Extracted((Part("naïve café"),), "utf-8")


def test_utf16_with_bom_is_decoded() -> None:
    extracted = extract(codecs.BOM_UTF16_LE + "héron".encode("utf-16-le"), "a.txt", ".txt")
    assert (extracted.parts[0].text, extracted.encoding) == ("héron", "utf-16")


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        (
            "Le caf\xe9 est tr\xe8s bon, \u201cdit-il\u201d. Na\xefve \xe0 la fran\xe7aise.",
            "cp1252",
        ),
        ("caf\xe9", "cp1252"),
        ("Gr\xfc\xdfe aus M\xfcnchen, sch\xf6ne Stra\xdfe", "cp1252"),
        ("Привет мир, это тест кодировки для русского текста.", "cp1251"),
    ],
)
def test_legacy_encoded_text_is_decoded_and_its_encoding_reported(text: str, encoding: str) -> None:
    extracted = extract(text.encode(encoding), "legacy.txt", ".txt")
    assert (extracted.parts[0].text, extracted.encoding) == (text, encoding)


@pytest.mark.parametrize(
    "data",
    [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", bytes(range(1, 32)) * 20, bytes(range(128, 256)) * 8],
)
def test_binary_garbage_is_refused(data: bytes) -> None:
    assert "binary" in error(data, "blob.txt") or "no text encoding" in error(data, "blob.txt")


def test_csv_gives_one_row_per_part_with_row_numbers_and_sniffed_delimiter() -> None:
    data = f"item;note\n\ngate;{FACT}\n".encode("cp1252")
    assert extract(data, "t.csv", ".csv").parts == (
        Part("| item | note |", "row 1"),
        Part(f"| gate | {FACT} |", "row 3", continues=True),
    )
    assert extract(b"a\tb|c\n", "t.tsv", ".tsv").parts == (Part("| a | b\\|c |", "row 1"),)


def test_json_is_pretty_printed_per_item_and_invalid_json_is_text() -> None:
    parts = extract(b'[{"bird": "heron"}, "plain"]', "b.json", ".json").parts
    assert parts == (Part('{\n  "bird": "heron"\n}', "item 1"), Part("plain", "item 2"))
    assert extract(b"{oops", "b.json", ".json").parts == (Part("{oops"),)
    lines = extract(b'{"a": 1}\n\nnot json\n', "b.jsonl", ".jsonl").parts
    assert lines == (Part('{\n  "a": 1\n}', "line 1"), Part("not json", "line 3"))


def test_more_plain_text_suffixes_can_be_named() -> None:
    assert extract(b"select 1", "q.sql", ".sql", text_suffixes={".sql"}).parts == (
        Part("select 1"),
    )
    assert "unsupported type '.sql'" in error(b"select 1", "q.sql")


def test_supported_and_image_suffixes_are_lower_case_with_a_dot_and_disjoint() -> None:
    assert {".docx", ".pptx", ".xlsx", ".xls", ".odt", ".ods", ".odp", ".epub", ".msg", ".eml"} <= (
        SUPPORTED_SUFFIXES
    )
    assert {".rtf", ".csv", ".json", ".ipynb", ".pdf", ".html", ".txt"} <= SUPPORTED_SUFFIXES
    assert all(s.startswith(".") and s == s.lower() for s in SUPPORTED_SUFFIXES | IMAGE_SUFFIXES)
    assert not SUPPORTED_SUFFIXES & IMAGE_SUFFIXES


def test_spreadsheet_locators_quote_sheet_names_as_excel_does() -> None:
    assert cell_range("Budget", 5, 1, 4) == "Budget!A5:D5"
    assert cell_range("It's", 1, 27, 27) == "'It''s'!AA1"
    assert cell_range("A1", 2, 1, 2) == "'A1'!A2:B2"
    assert table_row(["a\nb", None, 3]) == "| a b |  | 3 |"


# PDF and OCR -------------------------------------------------------------------------------------


def test_pdf_without_a_text_layer_says_how_to_turn_ocr_on() -> None:
    from tests.unit.read.test_documents import make_pdf

    message = error(make_pdf(None), "scan.pdf")
    assert "no text layer (a scan?); OCR is off: set ADRAP_READ__OCR=true" in message


def test_image_with_ocr_off_is_refused_with_the_setting() -> None:
    message = error(b"\x89PNG\r\n\x1a\n", "photo.png")
    assert "is an image; OCR is off: set ADRAP_READ__OCR=true" in message


def make_text_image(text: str) -> bytes:
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (900, 120), "white")
    ImageDraw.Draw(image).text((20, 30), text, fill="black", font=ImageFont.load_default(size=40))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


needs_tesseract = pytest.mark.skipif(
    shutil.which("tesseract") is None,
    reason="tesseract is not installed (apt-get install tesseract-ocr)",
)


@needs_tesseract
def test_ocr_reads_the_text_of_an_image() -> None:
    pytest.importorskip("pytesseract", reason="the ocr extra is not installed")
    text = extract_text_ocr(make_text_image("Herons nest in March"), "photo.png")
    assert "Herons nest in March" in text


@needs_tesseract
def test_ocr_of_a_broken_image_is_a_one_line_error() -> None:
    pytest.importorskip("pytesseract", reason="the ocr extra is not installed")
    assert "not a readable image" in error(b"\x89PNG\r\n\x1a\nbroken", "photo.png", ocr=True)


def extract_text_ocr(data: bytes, name: str) -> str:
    return join_parts(extract(data, name, "." + name.rsplit(".", 1)[1], ocr=True).parts)


@needs_tesseract
def test_ocr_reads_a_scanned_pdf_page_from_its_embedded_image() -> None:
    pytest.importorskip("pytesseract", reason="the ocr extra is not installed")
    from PIL import Image

    buffer = io.BytesIO()
    Image.open(io.BytesIO(make_text_image("Herons nest in March"))).save(buffer, format="PDF")
    assert "no text layer" in error(buffer.getvalue(), "scan.pdf")
    parts = extract(buffer.getvalue(), "scan.pdf", ".pdf", ocr=True).parts
    assert [p.locator for p in parts] == ["page 1"]
    assert "Herons nest in March" in parts[0].text


def test_legacy_xls_gives_sheets_and_located_rows() -> None:
    xlwt = pytest.importorskip("xlwt", reason="xlwt (test extra) writes the .xls")
    book = xlwt.Workbook()
    sheet = book.add_sheet("Budget")
    sheet.write(0, 0, "Item")
    sheet.write(0, 1, "Cost")
    sheet.write(2, 1, FACT)
    sheet.write(2, 2, 12.0)
    buffer = io.BytesIO()
    book.save(buffer)
    assert extract(buffer.getvalue(), "old.xls", ".xls").parts == (
        Part("# Budget", "Budget"),
        Part("| Item | Cost |", "Budget!A1:B1"),
        Part(f"| {FACT} | 12 |", "Budget!B3:C3", continues=True),
    )
    assert "not a readable Excel 97-2003 workbook" in error(b"\xd0\xcf\x11\xe0junk", "old.xls")


def test_docx_nested_lists_and_deleted_revisions() -> None:
    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'

    def item(text: str, level: int) -> str:
        return (
            f'<w:p><w:pPr><w:numPr><w:ilvl w:val="{level}"/><w:numId w:val="1"/></w:numPr></w:pPr>'
            f"<w:r><w:t>{text}</w:t></w:r></w:p>"
        )

    document = (
        f"<w:document {w}><w:body>"
        '<w:p><w:pPr><w:outlineLvl w:val="0"/></w:pPr><w:r><w:t>Plan</w:t></w:r></w:p>'
        f"{item('one', 0)}{item('one.a', 1)}"
        f"<w:p><w:r><w:t>{FACT}</w:t></w:r><w:del><w:r><w:delText> (old)</w:delText></w:r></w:del>"
        "</w:p></w:body></w:document>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("word/document.xml", document)
    assert extract_text(buffer.getvalue(), "plan.docx", ".docx") == (
        f"# Plan\n\n- one\n  - one.a\n\n{FACT}"
    )


def test_log_with_colour_codes_is_text_not_binary() -> None:
    log_text = "\x1b[32mINFO\x1b[0m heron seen\n" * 50
    assert extract(log_text.encode(), "app.log", ".log").parts == (Part(log_text),)


def test_office_formats_are_read_without_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a reader tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for data, name in [(make_pptx(), "t.pptx"), (make_epub(), "b.epub"), (make_docx(), "p.docx")]:
        assert extract(data, name, "." + name.rsplit(".", 1)[1]).parts
