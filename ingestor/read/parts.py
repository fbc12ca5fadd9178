"""What a format reader returns: located pieces of Markdown-like text.

Every reader in ``ingestor.read`` builds its result from these types and helpers, so the text of
every format has the same shape: headings as ``#`` lines, a table row as one ``| a | b |`` line,
bullets as ``- `` lines, paragraphs separated by a blank line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ingestor.errors import SourceError

__all__ = [
    "Extracted",
    "Part",
    "cell_range",
    "column_letter",
    "join_parts",
    "sheet_ref",
    "table_row",
    "unreadable",
]


@dataclass(frozen=True)
class Part:
    """One located piece of a document's text.

    Attributes:
        text: Markdown-like text (headings ``# ``..``###### ``, table rows ``| a | b |`` one per
            line, bullets ``- ``, paragraphs separated by a blank line).
        locator: where it is in the file: ``"page 3"``, ``"slide 2"``, ``"Budget!A5:D5"``,
            ``"row 12"``, ``"header"``, ``"body"``, ``"attachment report.pdf"``; ``""`` when the
            format has none.
        continues: True when the part joins the previous one with one newline (the next row of
            the same table) rather than a blank line.
    """

    text: str
    locator: str = ""
    continues: bool = False


@dataclass(frozen=True)
class Extracted:
    """A document's text as parts, and the text encoding assumed for a text file.

    Attributes:
        parts: the document's pieces, in reading order.
        encoding: the encoding a text file was decoded with (``"utf-8"``, ``"cp1252"``); None for
            binary formats (office, PDF, images).
    """

    parts: tuple[Part, ...]
    encoding: str | None = None

    @property
    def text(self) -> str:
        """The parts joined: a blank line between them, one newline before a continuing part."""
        return join_parts(self.parts)


def join_parts(parts: Iterable[Part]) -> str:
    """Join parts' text: ``"\\n"`` before a part that ``continues``, ``"\\n\\n"`` otherwise."""
    pieces: list[str] = []
    for part in parts:
        if pieces:
            pieces.append("\n" if part.continues else "\n\n")
        pieces.append(part.text)
    return "".join(pieces)


_CELL_SPACE = re.compile(r"\s+")


def table_row(cells: Iterable[object]) -> str:
    """Return one table row as a single line: ``| a | b |``.

    Whitespace inside a cell (newlines included) collapses to one space and ``|`` is escaped, so
    the row stays one line; ``None`` is an empty cell.
    """
    texts = (
        "" if cell is None else _CELL_SPACE.sub(" ", str(cell)).strip().replace("|", "\\|")
        for cell in cells
    )
    return "| " + " | ".join(texts) + " |"


def column_letter(index: int) -> str:
    """Return the spreadsheet column name of a 1-based column index (1 → A, 28 → AB)."""
    letters = ""
    while index > 0:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


_PLAIN_SHEET = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_LOOKS_LIKE_CELL = re.compile(r"[A-Za-z]{1,3}[0-9]+|[RrCc][0-9]*")


def sheet_ref(sheet: str) -> str:
    """Return a sheet name as an Excel reference writes it: quoted when it is not a plain name."""
    if not _PLAIN_SHEET.fullmatch(sheet) or _LOOKS_LIKE_CELL.fullmatch(sheet):
        return "'" + sheet.replace("'", "''") + "'"
    return sheet


def cell_range(sheet: str, row: int, first_col: int, last_col: int) -> str:
    """Return an Excel-style locator of one row's cells: ``Budget!A5:D5``, ``'Q3 plan'!B2``.

    The sheet name is quoted as Excel quotes it (spaces, punctuation, names that look like a cell
    reference), with an inner ``'`` doubled.
    """
    sheet = sheet_ref(sheet)
    first = f"{column_letter(first_col)}{row}"
    if last_col == first_col:
        return f"{sheet}!{first}"
    return f"{sheet}!{first}:{column_letter(last_col)}{row}"


def unreadable(name: str, kind: str, exc: BaseException) -> SourceError:
    """The one-line error for a file a library could not read, in the library's own words."""
    message = " ".join(str(exc).split())[:160]
    return SourceError(
        f"{name!r} is not a readable {kind} ({type(exc).__name__}: {message}); "
        "re-save it or remove it"
    )
