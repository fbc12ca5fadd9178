"""OpenDocument (.odt .ods .odp): a small reader of ``content.xml`` (zipfile + defusedxml).

Text documents give headings as ``#`` lines (by outline level), paragraphs, lists as ``- ``
bullets and tables as ``| a | b |`` rows, in one part. Spreadsheets give one part per sheet and
per non-empty row, located like Excel (``Budget!A5:D5``). Presentations give one part per slide
(``slide N``), the title as a ``#`` line, speaker notes kept.
"""

from __future__ import annotations

import io
import logging
import zipfile
from collections.abc import Iterator
from xml.etree.ElementTree import Element

from ingestor.errors import SourceError
from ingestor.read.parts import Extracted, Part, table_row
from ingestor.read.spreadsheet import sheet_parts

__all__ = ["read_odf"]

log = logging.getLogger(__name__)

_NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
}
_KIND = {".odt": "OpenDocument text", ".ods": "OpenDocument spreadsheet", ".odp": "presentation"}
# content.xml inflated beyond this is refused: a zip bomb, not a document.
_MAX_XML_BYTES = 256 * 2**20
# A sheet's trailing empty rows/columns are stored as one element repeated up to 1,048,576 times.
_MAX_REPEAT = 1000


def _q(tag: str) -> str:
    prefix, local = tag.split(":")
    return f"{{{_NS[prefix]}}}{local}"


_H, _P, _LIST, _ITEM = _q("text:h"), _q("text:p"), _q("text:list"), _q("text:list-item")
_TABLE, _ROW, _CELL = _q("table:table"), _q("table:table-row"), _q("table:table-cell")
_COVERED = _q("table:covered-table-cell")
_S, _TAB, _BR = _q("text:s"), _q("text:tab"), _q("text:line-break")
_FRAME, _NOTES = _q("draw:frame"), _q("presentation:notes")
_SKIPPED = frozenset({_q("office:annotation"), _q("text:tracked-changes"), _q("text:note")})


def read_odf(data: bytes, name: str, suffix: str) -> Extracted:
    """Return an OpenDocument file's text as parts (see the module docstring for their shape).

    Raises:
        SourceError: the file is password-protected, damaged, or not an OpenDocument file.
    """
    kind = _KIND[suffix]
    root = _content(data, name, kind)
    body = root.find("office:body", _NS)
    if body is None:
        raise SourceError(f"{name!r} is not a readable {kind} (no body); re-save it or remove it")
    if suffix == ".ods":
        parts: list[Part] = []
        for sheet in body.iter(_TABLE):
            parts += sheet_parts(sheet.get(_q("table:name"), "Sheet"), _sheet_rows(sheet))
        return Extracted(tuple(parts))
    if suffix == ".odp":
        return Extracted(tuple(_slides(body)))
    text = "\n\n".join(_blocks(body))
    return Extracted((Part(text),) if text.strip() else ())


def _content(data: bytes, name: str, kind: str) -> Element:
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import ParseError, fromstring

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if b"encryption-data" in _member(archive, "META-INF/manifest.xml", name, kind):
                raise SourceError(f"{name!r} is password-protected; save an unprotected copy")
            root: Element = fromstring(_member(archive, "content.xml", name, kind))
            return root
    except (zipfile.BadZipFile, ParseError, DefusedXmlException, ValueError, OSError) as exc:
        message = " ".join(str(exc).split())[:160]
        raise SourceError(
            f"{name!r} is not a readable {kind} ({type(exc).__name__}: {message}); "
            "re-save it or remove it"
        ) from exc


def _member(archive: zipfile.ZipFile, member: str, name: str, kind: str) -> bytes:
    try:
        info = archive.getinfo(member)
    except KeyError:
        if member.startswith("META-INF"):
            return b""  # optional in flat packages written by hand
        raise SourceError(
            f"{name!r} is not a readable {kind} (no {member}); re-save it or remove it"
        ) from None
    if info.file_size > _MAX_XML_BYTES:
        raise SourceError(
            f"{name!r} inflates to {info.file_size:,} bytes of XML (a zip bomb?); remove it"
        )
    return archive.read(info)


def _inline(element: Element) -> str:
    """Return the text of a paragraph-like element: spaces, tabs and line breaks kept."""
    pieces = [element.text or ""]
    for child in element:
        if child.tag == _S:
            pieces.append(" " * int(child.get(_q("text:c"), "1")))
        elif child.tag == _TAB:
            pieces.append("\t")
        elif child.tag == _BR:
            pieces.append("\n")
        elif child.tag not in _SKIPPED:
            pieces.append(_inline(child))
        pieces.append(child.tail or "")
    return "".join(pieces)


def _blocks(element: Element, bullet: str = "") -> Iterator[str]:
    """Yield the Markdown blocks under ``element`` in document order."""
    for child in element:
        if child.tag == _H:
            level = max(1, min(6, int(child.get(_q("text:outline-level"), "1") or 1)))
            text = _inline(child).strip()
            if text:
                yield "#" * level + " " + text
        elif child.tag == _P:
            text = _inline(child).strip()
            if text:
                yield bullet + text if bullet else text
        elif child.tag == _LIST:
            items = [
                line
                for item in child.iter(_ITEM)
                for line in _blocks(item, bullet="- ")
                if line.strip()
            ]
            if items:
                yield "\n".join(dict.fromkeys(items))  # nested lists: iter() visits them twice
        elif child.tag == _TABLE:
            rows = [table_row(cells) for _, cells in _sheet_rows(child) if any(cells)]
            if rows:
                yield "\n".join(rows)
        elif child.tag not in _SKIPPED:
            yield from _blocks(child, bullet)


def _sheet_rows(table: Element) -> Iterator[tuple[int, list[object]]]:
    """Yield ``(row number, cells)`` of a table, expanding repeated rows and cells (capped)."""
    number = 0
    for row in table.iter(_ROW):
        repeat = int(row.get(_q("table:number-rows-repeated"), "1"))
        cells: list[object] = []
        for cell in row:
            if cell.tag not in (_CELL, _COVERED):
                continue
            times = int(cell.get(_q("table:number-columns-repeated"), "1"))
            text = "\n".join(_inline(p) for p in cell.iter(_P)).strip()
            cells += [text or None] * (min(times, _MAX_REPEAT) if text else times)
        while cells and cells[-1] is None:
            cells.pop()
        if cells:
            for offset in range(min(repeat, _MAX_REPEAT)):
                yield number + offset + 1, cells
        number += repeat


def _slides(body: Element) -> Iterator[Part]:
    for number, page in enumerate(body.iter(_q("draw:page")), 1):
        lines: list[str] = []
        for frame in _frames(page):
            text = "\n".join(_blocks(frame)).strip()
            if text:
                title = frame.get(_q("presentation:class")) == "title"
                lines.append("# " + text if title else text)
        notes = page.find("presentation:notes", _NS)
        note_text = "\n\n".join(_blocks(notes)) if notes is not None else ""
        if note_text.strip():
            lines.append("### Notes:\n" + note_text)
        if lines:
            yield Part("\n\n".join(lines), f"slide {number}")


def _frames(element: Element) -> Iterator[Element]:
    """Yield the frames of a slide in order, inside groups too, but not its speaker notes."""
    for child in element:
        if child.tag == _FRAME:
            yield child
        elif child.tag != _NOTES:
            yield from _frames(child)
