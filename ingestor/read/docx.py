"""Word (.docx/.docm): a small reader of ``word/document.xml`` (zipfile + defusedxml).

Headings (a ``Title``/``Heading N`` style, or an outline level) become ``#`` lines, list items
``- `` lines (indented by level), tables one ``| a | b |`` line per row; paragraphs are separated
by a blank line. Deleted revisions, field codes, headers, footers and comments are left out.
markitdown's converter (mammoth) gives the same structure but parses styles in pure Python:
about 0.2 s for each file against a few milliseconds here (bench/formats.py).
"""

from __future__ import annotations

import logging
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from xml.etree.ElementTree import Element

from ingestor.errors import SourceError
from ingestor.read.archive import open_archive, read_member
from ingestor.read.parts import Extracted, Part, table_row, unreadable

__all__ = ["read_docx"]

log = logging.getLogger(__name__)

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_P, _TBL, _TR, _TC, _SDT = f"{_W}p", f"{_W}tbl", f"{_W}tr", f"{_W}tc", f"{_W}sdt"
_T, _TAB, _BR, _CR = f"{_W}t", f"{_W}tab", f"{_W}br", f"{_W}cr"
_VAL = f"{_W}val"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_KIND = "Word document"
_READ = ("word/document.xml", "word/styles.xml")  # the members read; media never are
_HEADING = re.compile(r"heading\s*([1-9])")


@dataclass(frozen=True)
class _Style:
    level: int = 0  # heading level 1..6, 0 for body text
    listed: bool = False  # its paragraphs are list items (numbering in the style)


def read_docx(data: bytes, name: str) -> Extracted:
    """Return a Word document's text as one Markdown part.

    Raises:
        SourceError: the document is password-protected, damaged, or not a Word document.
    """
    if data.startswith(_OLE_MAGIC):
        raise SourceError(f"{name!r} is password-protected; save an unprotected copy")
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import ParseError, fromstring

    try:
        with open_archive(data, name, _KIND, only=_READ) as archive:
            document = fromstring(_member(archive, "word/document.xml", name))
            styles_xml = _member(archive, "word/styles.xml", name, optional=True)
            styles = _styles(fromstring(styles_xml)) if styles_xml else {}
        body = document.find(f"{_W}body")
        blocks = list(_blocks(body, styles)) if body is not None else []
    except (ParseError, DefusedXmlException, ValueError, OSError) as exc:
        raise unreadable(name, _KIND, exc) from exc
    except RecursionError as exc:  # tables in tables in ...: _blocks recurses per level
        raise SourceError(
            f"{name!r} nests its content too deeply to be read; re-save it or remove it"
        ) from exc
    text = "\n\n".join(_merge_lists(blocks))
    return Extracted((Part(text),) if text.strip() else ())


def _member(archive: zipfile.ZipFile, member: str, name: str, *, optional: bool = False) -> bytes:
    try:
        return read_member(archive, member, name, _KIND)
    except KeyError:
        if optional:
            return b""
        raise SourceError(
            f"{name!r} is not a readable Word document (no {member}); re-save it or remove it"
        ) from None


def _styles(root: Element) -> dict[str, _Style]:
    """Map paragraph style ids to heading level and list-ness (``basedOn`` followed)."""
    raw: dict[str, tuple[str, str | None, int | None, bool]] = {}
    for style in root.iter(f"{_W}style"):
        style_id = style.get(f"{_W}styleId")
        if style_id is None:
            continue
        name_el, based_el = style.find(f"{_W}name"), style.find(f"{_W}basedOn")
        outline_el = style.find(f"{_W}pPr/{_W}outlineLvl")
        raw[style_id] = (
            (name_el.get(_VAL, "") if name_el is not None else "").lower(),
            based_el.get(_VAL) if based_el is not None else None,
            _int(outline_el.get(_VAL, "9")) if outline_el is not None else None,
            style.find(f"{_W}pPr/{_W}numPr") is not None,
        )
    resolved: dict[str, _Style] = {}
    for style_id in raw:
        level, listed, seen, current = 0, False, set(), style_id
        while current in raw and current not in seen:
            seen.add(current)
            style_name, based, outline, numbered = raw[current]
            listed = listed or numbered
            if not level:
                match = _HEADING.fullmatch(style_name)
                if match:
                    level = int(match.group(1))
                elif style_name == "title":
                    level = 1
                elif outline is not None and outline < 9:
                    level = outline + 1
            current = based or ""
        resolved[style_id] = _Style(min(level, 6), listed)
    return resolved


def _blocks(element: Element, styles: dict[str, _Style]) -> Iterator[str]:
    for child in element:
        if child.tag == _P:
            block = _paragraph(child, styles)
            if block:
                yield block
        elif child.tag == _TBL:
            rows = [table_row(_cells(row, styles)) for row in child.iter(_TR)]
            rows = [row for row in rows if row.strip("| ")]
            if rows:
                yield "\n".join(rows)
        elif child.tag == _SDT or child.tag == f"{_W}sdtContent":
            yield from _blocks(child, styles)


def _cells(row: Element, styles: dict[str, _Style]) -> list[str]:
    return [" ".join(_text(p) for p in cell.iter(_P)).strip() for cell in row if cell.tag == _TC]


def _paragraph(paragraph: Element, styles: dict[str, _Style]) -> str:
    text = _text(paragraph).strip()
    if not text:
        return ""
    properties = paragraph.find(f"{_W}pPr")
    style = _Style()
    level_in_list = -1
    if properties is not None:
        style_el = properties.find(f"{_W}pStyle")
        if style_el is not None:
            style = styles.get(style_el.get(_VAL, ""), _Style())
        outline = properties.find(f"{_W}outlineLvl")
        if outline is not None and _int(outline.get(_VAL, "9")) < 9:
            style = _Style(min(_int(outline.get(_VAL, "9")) + 1, 6), style.listed)
        numbering = properties.find(f"{_W}numPr")
        if numbering is not None:
            ilvl = numbering.find(f"{_W}ilvl")
            level_in_list = min(_int(ilvl.get(_VAL, "0")), 8) if ilvl is not None else 0
    if style.level:
        return "#" * style.level + " " + " ".join(text.split())
    if level_in_list >= 0 or style.listed:
        return "\x00" + "  " * max(level_in_list, 0) + "- " + text  # \x00: merged by _merge_lists
    return text


def _int(value: str) -> int:
    """An attribute's integer; a damaged value counts as 9 (no outline level)."""
    try:
        return int(value)
    except ValueError:
        return 9


def _text(paragraph: Element) -> str:
    """Return the visible text of a paragraph: runs, tabs and breaks; not deleted text."""
    pieces = []
    for node in paragraph.iter():
        if node.tag == _T:
            pieces.append(node.text or "")
        elif node.tag == _TAB:
            pieces.append("\t")
        elif node.tag in (_BR, _CR):
            pieces.append("\n")
    return "".join(pieces)


def _merge_lists(blocks: list[str]) -> list[str]:
    """Join consecutive list items into one block, one item per line."""
    merged: list[str] = []
    previous_listed = False
    for block in blocks:
        listed = block.startswith("\x00")
        block = block.removeprefix("\x00")
        if listed and previous_listed:
            merged[-1] += "\n" + block
        else:
            merged.append(block)
        previous_listed = listed
    return merged
