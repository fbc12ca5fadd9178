"""Excel workbooks: .xlsx/.xlsm with openpyxl (MIT), legacy .xls with xlrd (BSD).

Each sheet is a ``# Sheet`` part, then one ``| a | b |`` part per non-empty row, located by the
row's used cell range (``Budget!A5:D5``) and continuing the previous row. Cached values are read,
not formulas (a workbook saved by Excel carries them).
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import zipfile
from collections.abc import Iterable, Sequence

from ingestor.errors import SourceError
from ingestor.read.parts import Extracted, Part, cell_range, sheet_ref, table_row

__all__ = ["SheetRows", "read_xls", "read_xlsx", "sheet_parts"]

log = logging.getLogger(__name__)

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# A sheet's rows: (1-based row number, the row's cells from column A); None is an empty cell.
SheetRows = Iterable[tuple[int, Sequence[object]]]


def sheet_parts(sheet: str, rows: SheetRows) -> list[Part]:
    """Return a sheet's heading part (located by the sheet's name) and one part per non-empty row.

    A sheet without any non-empty cell gives no parts.
    """
    parts = [Part(f"# {sheet}", sheet_ref(sheet))]
    for number, cells in rows:
        used = [i for i, cell in enumerate(cells, 1) if _text(cell)]
        if not used:
            continue
        row = table_row(_text(cell) for cell in cells[used[0] - 1 : used[-1]])
        parts.append(
            Part(row, cell_range(sheet, number, used[0], used[-1]), continues=len(parts) > 1)
        )
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
        SourceError: the workbook is password-protected or damaged.
    """
    if data.startswith(_OLE_MAGIC):
        raise SourceError(f"{name!r} is password-protected; save an unprotected copy")
    from openpyxl import load_workbook

    parts: list[Part] = []
    try:
        book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            for sheet in book.worksheets:
                rows = (
                    (number, row) for number, row in enumerate(sheet.iter_rows(values_only=True), 1)
                )
                parts += sheet_parts(sheet.title, rows)
        finally:
            book.close()
    # openpyxl raises zipfile, XML and built-in errors for damaged files (InvalidFileException
    # is an OSError); all of them mean "cannot be read" here.
    except (
        zipfile.BadZipFile,
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        SyntaxError,
    ) as exc:
        raise _unreadable(name, "Excel workbook", exc) from exc
    return Extracted(tuple(parts))


def read_xls(data: bytes, name: str) -> Extracted:
    """Return a legacy .xls workbook's sheets as heading and row parts.

    Raises:
        SourceError: the workbook is password-protected or damaged.
    """
    import xlrd

    parts: list[Part] = []
    try:
        book = xlrd.open_workbook(file_contents=data, on_demand=True)
        try:
            for index in range(book.nsheets):
                sheet = book.sheet_by_index(index)
                rows = (
                    (number + 1, [_xls_value(c, book.datemode) for c in sheet.row(number)])
                    for number in range(sheet.nrows)
                )
                parts += sheet_parts(sheet.name, rows)
        finally:
            book.release_resources()
    except xlrd.XLRDError as exc:
        if "encrypt" in str(exc).lower():
            raise SourceError(f"{name!r} is password-protected; save an unprotected copy") from exc
        raise _unreadable(name, "Excel 97-2003 workbook", exc) from exc
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
        raise _unreadable(name, "Excel 97-2003 workbook", exc) from exc
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


def _unreadable(name: str, kind: str, exc: BaseException) -> SourceError:
    message = " ".join(str(exc).split())[:160]
    return SourceError(
        f"{name!r} is not a readable {kind} ({type(exc).__name__}: {message}); "
        "re-save it or remove it"
    )
