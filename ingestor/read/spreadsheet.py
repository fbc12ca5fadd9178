"""Excel workbooks: .xlsx/.xlsm with openpyxl (MIT), legacy .xls with xlrd (BSD).

Each sheet is a ``# Sheet`` part, then one ``| a | b |`` part per non-empty row, located by the
row's used cell range (``Budget!A5:D5``) and continuing the previous row. Cached values are read,
not formulas (a workbook saved by Excel carries them). Only the cells a file holds are read: a
declared dimension (``A1:XFD1048576``) is never trusted, and a file's tables write out at most
``MAX_CELLS`` cells, none past column ``MAX_COLUMNS`` (docs/formats.md).
"""

from __future__ import annotations

import datetime as dt
import io
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ingestor.errors import SourceError
from ingestor.read.archive import INFLATE_ERRORS, check_archive
from ingestor.read.parts import (
    Extracted,
    Part,
    cell_range,
    column_letter,
    sheet_ref,
    table_row,
    unreadable,
)

__all__ = [
    "MAX_CELLS",
    "MAX_COLUMNS",
    "CellBudget",
    "SheetRows",
    "read_xls",
    "read_xlsx",
    "sheet_parts",
]

log = logging.getLogger(__name__)

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
#: The most columns a sheet has in Excel and LibreOffice (XFD): a cell past it is refused.
MAX_COLUMNS = 16_384
#: The most cells a file's tables write out, empty cells between used ones included (a sheet of
#: 100,000 rows by 20 columns); past it the file is refused rather than expanded.
MAX_CELLS = 2_000_000
# A sheet's rows: (1-based row number, the column of the first cell given, the cells from there);
# None is an empty cell. Empty rows and the empty cells before a row's first may be left out.
SheetRows = Iterable[tuple[int, int, Sequence[object]]]


class CellBudget:
    """The cells one file's tables may still write out; refuses the file past its limits."""

    def __init__(self, name: str, cells: int = MAX_CELLS) -> None:
        self.name = name
        self.limit = cells
        self.left = cells

    def need(self, cells: int, where: str) -> None:
        """Refuse the file unless ``cells`` more cells fit (nothing is taken)."""
        if cells > self.left:
            raise SourceError(
                f"{self.name!r} is refused: its tables would write out more than "
                f"{self.limit:,} cells ({where}: {cells:,} cells, {self.left:,} left); split "
                "it or remove it"
            )

    def take(self, cells: int, where: str) -> None:
        """Count ``cells`` written out, refusing the file past the limit."""
        self.need(cells, where)
        self.left -= cells

    def column(self, column: int, where: str) -> None:
        """Refuse the file if a non-empty cell lands past ``MAX_COLUMNS``."""
        if column > MAX_COLUMNS:
            raise SourceError(
                f"{self.name!r} is refused: {where} puts a cell in column {column:,}, past the "
                f"{MAX_COLUMNS:,} ({column_letter(MAX_COLUMNS)}) a sheet can have; re-save it "
                "or remove it"
            )


def sheet_parts(sheet: str, rows: SheetRows, budget: CellBudget) -> list[Part]:
    """Return a sheet's heading part (located by the sheet's name) and one part per non-empty row.

    A sheet without any non-empty cell gives no parts. Each row's cells from its first to its
    last non-empty one are taken from ``budget``.

    Raises:
        SourceError: a cell past ``MAX_COLUMNS``, or more cells than ``budget`` holds.
    """
    ref = sheet_ref(sheet)
    parts = [Part(f"# {sheet}", ref)]
    for number, first, cells in rows:
        used = [i for i, cell in enumerate(cells) if _text(cell)]
        if not used:
            continue
        low, high = first + used[0], first + used[-1]
        where = f"{ref} row {number:,}"
        budget.column(high, where)
        budget.take(high - low + 1, where)
        row = table_row(_text(cell) for cell in cells[used[0] : used[-1] + 1])
        parts.append(Part(row, cell_range(sheet, number, low, high), continues=len(parts) > 1))
    return parts if len(parts) > 1 else []


def _text(cell: object) -> str:
    if cell is None:
        return ""
    if isinstance(cell, float) and cell.is_integer():
        return str(int(cell))
    if isinstance(cell, dt.datetime) and cell.time() == dt.time():
        return cell.date().isoformat()
    if isinstance(cell, dt.date | dt.time):
        return cell.isoformat()
    return str(cell).strip()


def read_xlsx(data: bytes, name: str) -> Extracted:
    """Return an .xlsx/.xlsm workbook's sheets as heading and row parts.

    Raises:
        SourceError: the workbook is password-protected, damaged, or refused by a limit
            (``ingestor.read.archive``, ``MAX_CELLS``, ``MAX_COLUMNS``).
    """
    if data.startswith(_OLE_MAGIC):
        raise SourceError(f"{name!r} is password-protected; save an unprotected copy")
    from openpyxl import load_workbook
    from openpyxl.utils.exceptions import CellCoordinatesException, InvalidFileException

    check_archive(data, name, "Excel workbook")
    # openpyxl raises zipfile, XML and built-in errors for damaged files; all of them mean
    # "cannot be read" here.
    damaged: tuple[type[Exception], ...] = (
        *INFLATE_ERRORS,
        CellCoordinatesException,
        InvalidFileException,
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        SyntaxError,
    )
    budget = CellBudget(name)
    parts: list[Part] = []
    try:
        book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            for sheet in book.worksheets:
                parts += sheet_parts(sheet.title, _xlsx_rows(book, sheet), budget)
        finally:
            book.close()
    except damaged as exc:
        raise unreadable(name, "Excel workbook", exc) from exc
    return Extracted(tuple(parts))


def _xlsx_rows(book: Any, sheet: Any) -> Iterator[tuple[int, int, list[object]]]:
    """The rows a worksheet's XML holds, with only the cells it holds.

    openpyxl's ``iter_rows`` pads every row to the declared dimension and yields each missing
    row: a 1.7 KB file declaring ``A1:XFD1048576`` stalled for half an hour. Its own parser,
    driven as ``iter_rows`` drives it, yields only the rows and cells present.
    """
    from openpyxl.worksheet._reader import WorkSheetParser

    with sheet._get_source() as source:
        parser = WorkSheetParser(
            source,
            sheet._shared_strings,
            data_only=True,
            epoch=book.epoch,
            date_formats=book._date_formats,
            timedelta_formats=book._timedelta_formats,
        )
        for number, cells in parser.parse():
            values: dict[int, object] = {}
            for cell in cells:
                values[cell["column"]] = cell["value"]  # a repeated address: the last one wins
            used = [column for column, value in values.items() if _text(value)]
            if used:
                first, last = min(used), max(used)
                yield number, first, [values.get(c) for c in range(first, last + 1)]


def read_xls(data: bytes, name: str) -> Extracted:
    """Return a legacy .xls workbook's sheets as heading and row parts.

    Raises:
        SourceError: the workbook is password-protected or damaged.
    """
    import xlrd

    parts: list[Part] = []
    budget = CellBudget(name)
    try:
        # ragged_rows: a row is as long as its last cell, not padded to the widest row (one cell
        # in column IV padded 65,536 rows); each sheet is unloaded once read.
        book = xlrd.open_workbook(file_contents=data, on_demand=True, ragged_rows=True)
        try:
            for index in range(book.nsheets):
                sheet = book.sheet_by_index(index)
                rows = (
                    (number + 1, 1, [_xls_value(c, book.datemode) for c in sheet.row(number)])
                    for number in range(sheet.nrows)
                )
                parts += sheet_parts(sheet.name, rows, budget)
                book.unload_sheet(index)
        finally:
            book.release_resources()
    except xlrd.XLRDError as exc:
        if "encrypt" in str(exc).lower():
            raise SourceError(f"{name!r} is password-protected; save an unprotected copy") from exc
        raise unreadable(name, "Excel 97-2003 workbook", exc) from exc
    except (
        xlrd.compdoc.CompDocError,
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        AssertionError,
        EOFError,
    ) as exc:
        raise unreadable(name, "Excel 97-2003 workbook", exc) from exc
    return Extracted(tuple(parts))


def _xls_value(cell: object, datemode: int) -> object:
    import xlrd

    ctype = getattr(cell, "ctype", None)
    value = getattr(cell, "value", None)
    if ctype == xlrd.XL_CELL_DATE and isinstance(value, float):
        try:
            return xlrd.xldate.xldate_as_datetime(value, datemode)
        except (ValueError, OverflowError, xlrd.xldate.XLDateError):
            return value
    if ctype == xlrd.XL_CELL_BOOLEAN:
        return bool(value)
    if ctype in (xlrd.XL_CELL_ERROR, xlrd.XL_CELL_EMPTY, xlrd.XL_CELL_BLANK):
        return None
    return value
