"""Zip bombs and lying headers, made from the office files of :mod:`testkit.office`: for
tests/unit/read/test_bombs.py and bench/hostile.py."""

from __future__ import annotations

import io
import struct
import zipfile

from testkit.office import make_odf

GIB = 2**30


def declare(
    data: bytes, member: str, *, size: int | None = None, packed: int | None = None
) -> bytes:
    """Rewrite the zip directory entry of ``member`` to declare another uncompressed ``size`` or
    compressed size ``packed``; its data is left as it is (a header that lies)."""
    buffer = bytearray(data)
    name = member.encode()
    at = buffer.find(b"PK\x01\x02")
    while at >= 0:
        name_length = struct.unpack_from("<H", buffer, at + 28)[0]
        if buffer[at + 46 : at + 46 + name_length] == name:
            if packed is not None:
                struct.pack_into("<I", buffer, at + 20, packed)
            if size is not None:
                struct.pack_into("<I", buffer, at + 24, size)
            return bytes(buffer)
        at = buffer.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"no {member} in the zip")


def with_member(data: bytes, member: str, payload: bytes) -> bytes:
    """Return the zip ``data`` with one more member, deflated."""
    buffer = io.BytesIO(data)
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, payload)
    return buffer.getvalue()


def ods(table: str) -> bytes:
    """A spreadsheet with one sheet ``S`` holding ``table``'s rows, deflated as LibreOffice does."""
    plain = make_odf(
        f'<office:spreadsheet><table:table table:name="S">{table}</table:table>'
        "</office:spreadsheet>"
    )
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(plain)) as source,
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive,
    ):
        for info in source.infolist():
            archive.writestr(info.filename, source.read(info))
    return buffer.getvalue()


def cell(text: str = "", repeat: int = 1) -> str:
    body = f"<text:p>{text}</text:p>" if text else ""
    return f'<table:table-cell table:number-columns-repeated="{repeat}">{body}</table:table-cell>'


def row(cells: str, repeat: int = 1) -> str:
    return f'<table:table-row table:number-rows-repeated="{repeat}">{cells}</table:table-row>'


def make_xlsx(rows: dict[int, str]) -> bytes:
    """A workbook holding ``rows[n]`` in cell A of row n (openpyxl)."""
    import openpyxl

    book = openpyxl.Workbook()
    for number, text in rows.items():
        book.active.cell(row=number, column=1, value=text)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def rewrite_member(data: bytes, member: str, old: bytes, new: bytes) -> bytes:
    """Return the zip ``data`` with ``old`` replaced by ``new`` in ``member`` (which holds it)."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as source,
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive,
    ):
        assert any(
            old in source.read(info) for info in source.infolist() if info.filename == member
        )
        for info in source.infolist():
            content = source.read(info)
            archive.writestr(
                info.filename, content.replace(old, new) if info.filename == member else content
            )
    return buffer.getvalue()
