"""OpenDocument (.odt .ods .odp): a small reader of ``content.xml`` (zipfile + defusedxml).

Text documents give headings as ``#`` lines (by outline level), paragraphs, lists as ``- ``
bullets and tables as ``| a | b |`` rows, in one part. Spreadsheets give one part per sheet and
per non-empty row, located like Excel (``Budget!A5:D5``). Presentations give one part per slide
(``slide N``), the title as a ``#`` line, speaker notes kept.

A repeated cell or row (``table:number-columns-repeated``, ``table:number-rows-repeated``, up to
a billion in a 714-byte file) is counted, never expanded while empty: trailing empty cells and
rows give nothing, and a repeated non-empty one is written out within the limits of
:class:`~ingestor.read.spreadsheet.CellBudget` (refused past them).
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Iterator
from xml.etree.ElementTree import Element

from ingestor.errors import SourceError
from ingestor.read.archive import open_archive, read_member
from ingestor.read.parts import Extracted, Part, sheet_ref, table_row, unreadable
from ingestor.read.spreadsheet import CellBudget, sheet_parts

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
# <text:s text:c="N"/> is N spaces: more than this many in a row are written as this many.
_MAX_SPACES = 100
_MAX_COUNT = 2**31
_READ = ("META-INF/manifest.xml", "content.xml")  # the members read; pictures never are


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
    budget = CellBudget(name)
    try:
        if suffix == ".ods":
            parts: list[Part] = []
            for sheet in body.iter(_TABLE):
                title = sheet.get(_q("table:name"), "Sheet")
                rows = _sheet_rows(sheet, sheet_ref(title), budget)
                parts += sheet_parts(title, rows, budget)
            return Extracted(tuple(parts))
        if suffix == ".odp":
            return Extracted(tuple(_slides(body, budget)))
        text = "\n\n".join(_blocks(body, budget))
    except RecursionError as exc:  # frames in frames, spans in spans: each level recurses
        raise SourceError(
            f"{name!r} nests its content too deeply to be read; re-save it or remove it"
        ) from exc
    return Extracted((Part(text),) if text.strip() else ())


def _content(data: bytes, name: str, kind: str) -> Element:
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import ParseError, fromstring

    try:
        with open_archive(data, name, kind, only=_READ) as archive:
            if b"encryption-data" in _member(archive, "META-INF/manifest.xml", name, kind):
                raise SourceError(f"{name!r} is password-protected; save an unprotected copy")
            root: Element = fromstring(_member(archive, "content.xml", name, kind))
            return root
    except (ParseError, DefusedXmlException, ValueError, OSError) as exc:
        raise unreadable(name, kind, exc) from exc


def _member(archive: zipfile.ZipFile, member: str, name: str, kind: str) -> bytes:
    try:
        return read_member(archive, member, name, kind)
    except KeyError:
        if member.startswith("META-INF"):
            return b""  # optional in flat packages written by hand
        raise SourceError(
            f"{name!r} is not a readable {kind} (no {member}); re-save it or remove it"
        ) from None


def _count(value: str | None) -> int:
    """A count attribute (repeats, spaces, a level): a positive integer; a damaged one is 1,
    and one past 2**31 is taken as 2**31 (row numbers a thousand digits long serve no one)."""
    try:
        return min(max(1, int(value or 1)), _MAX_COUNT)
    except ValueError:  # not a number, or more digits than int() takes
        return 1


def _inline(element: Element) -> str:
    """Return the text of a paragraph-like element: spaces, tabs and line breaks kept."""
    pieces = [element.text or ""]
    for child in element:
        if child.tag == _S:
            pieces.append(" " * min(_count(child.get(_q("text:c"))), _MAX_SPACES))
        elif child.tag == _TAB:
            pieces.append("\t")
        elif child.tag == _BR:
            pieces.append("\n")
        elif child.tag not in _SKIPPED:
            pieces.append(_inline(child))
        pieces.append(child.tail or "")
    return "".join(pieces)


def _blocks(element: Element, budget: CellBudget, bullet: str = "") -> Iterator[str]:
    """Yield the Markdown blocks under ``element`` in document order."""
    for child in element:
        if child.tag == _H:
            level = min(6, _count(child.get(_q("text:outline-level"))))
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
                for line in _blocks(item, budget, bullet="- ")
                if line.strip()
            ]
            if items:
                yield "\n".join(dict.fromkeys(items))  # nested lists: iter() visits them twice
        elif child.tag == _TABLE:
            rows = []
            for number, first, cells in _sheet_rows(child, "a table", budget):
                # a text document's table keeps its leading empty cells
                budget.take(first - 1 + len(cells), f"a table's row {number:,}")
                rows.append(table_row([None] * (first - 1) + cells))
            if rows:
                yield "\n".join(rows)
        elif child.tag not in _SKIPPED:
            yield from _blocks(child, budget, bullet)


def _sheet_rows(
    table: Element, where: str, budget: CellBudget
) -> Iterator[tuple[int, int, list[object]]]:
    """Yield ``(row number, first column, cells)`` of a table's non-empty rows, expanding the
    repeats of non-empty rows and cells only (within ``budget``); an empty repeat is counted.
    ``where`` names the table in messages."""
    number = 0
    for row in table.iter(_ROW):
        repeat = _count(row.get(_q("table:number-rows-repeated")))
        first, cells = _row_cells(row, f"{where} row {number + 1:,}", budget)
        if cells:
            # the row is written out `repeat` times: refuse before, not after, a billion copies
            budget.need(
                len(cells) * repeat,
                f"{where} row {number + 1:,} (table:number-rows-repeated={repeat:,})",
            )
            for offset in range(repeat):
                yield number + offset + 1, first, cells
        number += repeat


def _row_cells(row: Element, where: str, budget: CellBudget) -> tuple[int, list[object]]:
    """Return the column of a row's first non-empty cell and its cells from there to its last
    non-empty one (None: empty); empty repeats only move the column on."""
    column = 1  # of the next cell
    first = 0
    cells: list[object] = []
    for cell in row:
        if cell.tag not in (_CELL, _COVERED):
            continue
        times = _count(cell.get(_q("table:number-columns-repeated")))
        text = "\n".join(_inline(p) for p in cell.iter(_P)).strip()
        if text:
            budget.column(column + times - 1, f"{where} (table:number-columns-repeated={times:,})")
            if not cells:
                first = column
            cells += [None] * (column - first - len(cells))  # the empty cells in between
            cells += [text] * times
        column += times
    return first, cells


def _slides(body: Element, budget: CellBudget) -> Iterator[Part]:
    for number, page in enumerate(body.iter(_q("draw:page")), 1):
        lines: list[str] = []
        for frame in _frames(page):
            text = "\n".join(_blocks(frame, budget)).strip()
            if text:
                title = frame.get(_q("presentation:class")) == "title"
                lines.append("# " + text if title else text)
        notes = page.find("presentation:notes", _NS)
        note_text = "\n\n".join(_blocks(notes, budget)) if notes is not None else ""
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
