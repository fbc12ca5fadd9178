"""A new user's office share, through the real CLI: every readable document is in the tree, each
fact is found by `adrap query` with its file and locator, and each skipped file has a reason.

Real parts: the packaged MiniLM, tiktoken, UMAP/GMM, qdrant-edge, and the real converters on
files written by the libraries that write them (python-docx, python-pptx, openpyxl) or laid out
as LibreOffice and mail clients lay them out (ODF zip, RFC 5322 mail).
"""

from __future__ import annotations

import csv
import io
import json
from email.message import EmailMessage
from pathlib import Path

import pytest

from tests.integration.test_end_to_end import adrap
from tests.unit.read.test_formats import make_odf

pytestmark = pytest.mark.integration

FACTS = {
    "minutes.docx": "The lighthouse keeper repainted the lantern room in cobalt blue",
    "deck.pptx": "Migrating cranes rest at the reservoir every October",
    "budget.xlsx": "Glacier survey helicopter rental costs 48000 euros",
    "report.odt": "The bakery ovens reach four hundred degrees before dawn",
    "invite.eml": "The chess tournament moves to the old library hall",
    "stations.csv": "Tidal gauge station Kestrel Point records salinity hourly",
    "legacy.txt": "Caf\u00e9 cr\u00e8me orders doubled after the piano recital",
}
# Where the fact's chunk may say it is: small sections share a chunk, whose locator spans them.
QUESTIONS: dict[str, tuple[str, set[str] | None]] = {
    "minutes.docx": ("What colour was the lantern room repainted?", None),
    "deck.pptx": ("Where do migrating cranes rest in October?", {"slide 2", "slides 1-2"}),
    "budget.xlsx": (
        "How much does the glacier survey helicopter cost?",
        {"Costs!A3:C3", "Costs!A1:C3", "Costs \u2013 Costs!A3:C3"},
    ),
    "report.odt": ("How hot are the bakery ovens?", None),
    "invite.eml": ("Where is the chess tournament held?", {"body", "header \u2013 body"}),
    "stations.csv": ("Which station records salinity hourly?", {"row 3", "rows 1-3"}),
    "legacy.txt": ("What happened to cafe creme orders after the recital?", None),
}


def write_share(root: Path) -> None:
    import docx
    import openpyxl
    import pptx

    root.mkdir()
    document = docx.Document()
    document.add_heading("Harbour committee", 1)
    document.add_heading("Maintenance", 2)
    document.add_paragraph(FACTS["minutes.docx"] + ".")
    document.save(str(root / "minutes.docx"))

    deck = pptx.Presentation()
    for title, body in [("Agenda", "Welcome and introductions."), ("Birds", FACTS["deck.pptx"])]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.save(str(root / "deck.pptx"))

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Costs"
    sheet.append(["Item", "Amount", "Note"])
    sheet.append(["Boots", 120, "field kit"])
    sheet.append(["Helicopter", 48000, FACTS["budget.xlsx"]])
    book.save(str(root / "budget.xlsx"))

    (root / "report.odt").write_bytes(
        make_odf(
            '<office:text><text:h text:outline-level="1">Bakery</text:h>'
            f"<text:p>{FACTS['report.odt']}.</text:p></office:text>"
        )
    )

    mail = EmailMessage()
    mail["Subject"] = "Tournament venue"
    mail["From"] = "club@example.org"
    mail["To"] = "members@example.org"
    mail.set_content(FACTS["invite.eml"] + ".\n")
    (root / "invite.eml").write_bytes(mail.as_bytes())

    buffer = io.StringIO()
    csv.writer(buffer).writerows(
        [["station", "measure"], ["North Quay", "wind"], [FACTS["stations.csv"], "salinity"]]
    )
    (root / "stations.csv").write_text(buffer.getvalue())

    (root / "legacy.txt").write_bytes((FACTS["legacy.txt"] + ".\n").encode("cp1252"))
    (root / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)  # OCR is off
    (root / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    (root / "~$minutes.docx").write_bytes(b"lock")  # Word's lock file: ignored
    (root / "Thumbs.db").write_bytes(b"\x00" * 32)  # ignored


@pytest.fixture(scope="module")
def share(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    base = tmp_path_factory.mktemp("office")
    root = base / "share"
    write_share(root)
    state = base / "state"
    result = adrap("build", str(root), state=state)
    assert result.returncode == 0, result.stderr
    return root, state, result.stdout + result.stderr


def test_every_readable_office_document_is_in_the_tree(share: tuple[Path, Path, str]) -> None:
    _, state, _ = share
    status = json.loads(adrap("status", "--json", state=state).stdout)
    assert status["documents"] == len(FACTS)
    unread = status["unread"]
    reasons = {row["source"]: row["reason"] for row in unread["skipped_files"]}
    assert set(reasons) == {"scan.png", "broken.docx"}
    assert "OCR is off" in reasons["scan.png"]
    assert "broken.docx" in reasons["broken.docx"]


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_each_fact_is_found_with_its_file_and_locator(
    share: tuple[Path, Path, str], name: str
) -> None:
    _, state, _ = share
    question, locator = QUESTIONS[name]
    result = adrap("query", question, "--json", "--layers", "0", "--max-tokens", "300", state=state)
    assert result.returncode == 0, result.stderr
    top = json.loads(result.stdout)["hits"][0]
    assert top["source"] == name, top
    if locator is not None:
        assert top["locator"] in locator
    if name == "minutes.docx":
        assert top["section"] == "Harbour committee > Maintenance"
    if name == "legacy.txt":
        assert "Caf\u00e9 cr\u00e8me" in top["text"]  # cp1252 read as such, not mojibake
