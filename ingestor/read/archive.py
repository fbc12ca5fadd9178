"""Zip containers (.docx .xlsx .pptx .odt .ods .odp .epub) checked before anything inflates them.

A few kilobytes of zip can declare gigabytes: a 3 GiB ``sharedStrings.xml``, a slide image of
zeros, a million empty members. Every zip-based reader opens its file through
:func:`open_archive` (or :func:`check_archive` before handing the bytes to a library), which reads
the central directory only and refuses the file when

* it lists more than ``max_members`` members, or its directory is over ``max_directory_bytes``
  (both checked before zipfile builds an object per entry),
* a member declares more than ``max_member_bytes`` uncompressed,
* all members together declare more than ``max_total_bytes``,
* a member larger than ``ratio_grace_bytes`` inflates more than ``max_ratio`` times its
  compressed size,
* the members claim more compressed bytes than the file holds (overlapping members),
* a member is encrypted or uses a compression method that cannot be read.

The member checks cover every member a reader may inflate: all of them for a library that reads
what it likes (python-pptx loads every picture a slide links: media count like any other), only
``document.xml``/``content.xml`` and friends for the Word and OpenDocument readers, which never
open the rest.
Python's zipfile stops inflating a member at its declared size (a header that lies gives a CRC
error, not more bytes), and :func:`read_member` bounds the bytes it streams as well. The limits
are documented in docs/formats.md; past one the file is refused (``SourceError``), never read.
"""

from __future__ import annotations

import io
import lzma
import struct
import zipfile
import zlib
from collections.abc import Collection
from dataclasses import dataclass

from ingestor.errors import SourceError
from ingestor.read.parts import unreadable

__all__ = [
    "INFLATE_ERRORS",
    "LIMITS",
    "ZipLimits",
    "check_archive",
    "open_archive",
    "read_member",
]

#: What reading a damaged member raises (a bad CRC, a corrupt or truncated compressed stream):
#: readers that hand the bytes to a library catch these too, and say "not readable".
INFLATE_ERRORS: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
)
_OPEN_ERRORS: tuple[type[Exception], ...] = (
    *INFLATE_ERRORS,
    zipfile.LargeZipFile,
    ValueError,
    OSError,
)
_READABLE_METHODS = frozenset(
    {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
)
_EOCD = b"PK\x05\x06"  # end of central directory record
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"


@dataclass(frozen=True)
class ZipLimits:
    """What a zip container may declare before it is refused unread (docs/formats.md)."""

    max_member_bytes: int = 256 * 2**20
    max_total_bytes: int = 2**30
    max_ratio: int = 100
    ratio_grace_bytes: int = 2**20
    max_members: int = 10_000
    # an entry is 46 bytes plus its name and extra fields: ~100 in files Office writes
    max_directory_bytes: int = 4 * 2**20


LIMITS = ZipLimits()


def open_archive(
    data: bytes,
    name: str,
    kind: str,
    limits: ZipLimits = LIMITS,
    *,
    only: Collection[str] | None = None,
) -> zipfile.ZipFile:
    """Open ``data`` as a zip after checking what its members declare (the caller closes it).

    Args:
        only: the members the caller will read (the others are never inflated, so what they
            declare is not held against the file: a film in a Word document); None: all of
            them, for a library that reads what it likes.

    Raises:
        SourceError: the file is not a zip, or is refused by one of ``limits``; the message
            names the member, the value and the limit.
    """
    _check_directory(data, name, limits)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except _OPEN_ERRORS as exc:
        raise unreadable(name, kind, exc) from exc
    try:
        _check_members(archive, name, len(data), limits, only)
    except SourceError:
        archive.close()
        raise
    return archive


def check_archive(data: bytes, name: str, kind: str, limits: ZipLimits = LIMITS) -> None:
    """:func:`open_archive`'s checks, for bytes a library will open itself (openpyxl, pptx)."""
    open_archive(data, name, kind, limits).close()


def read_member(
    archive: zipfile.ZipFile, member: str, name: str, kind: str, limits: ZipLimits = LIMITS
) -> bytes:
    """Return one member's bytes, streaming at most ``limits.max_member_bytes`` of them.

    Raises:
        KeyError: no such member.
        SourceError: the member is damaged, or inflates past the limit (its header lied).
    """
    info = archive.getinfo(member)
    try:
        with archive.open(info) as stream:
            data = stream.read(limits.max_member_bytes + 1)
    except INFLATE_ERRORS as exc:
        raise unreadable(name, kind, exc) from exc
    if len(data) > limits.max_member_bytes:
        raise _refused(
            name,
            f"its member {member!r} inflates past {limits.max_member_bytes:,} bytes although it "
            f"declares {info.file_size:,}",
        )
    return data


def _check_directory(data: bytes, name: str, limits: ZipLimits) -> None:
    """Refuse a directory of too many entries before zipfile builds an object for each."""
    at = data.rfind(_EOCD, max(0, len(data) - 22 - 0xFFFF))
    if at < 0 or len(data) - at < 22:
        return  # not a zip: zipfile says so
    entries, size = struct.unpack_from("<HI", data, at + 10)  # total entries, directory bytes
    locator = at - 20
    record = locator - 56
    if (
        record >= 0
        and data[locator : locator + 4] == _EOCD64_LOCATOR
        and data[record : record + 4] == _EOCD64
    ):
        entries, size = struct.unpack_from("<QQ", data, record + 32)
    if entries > limits.max_members:
        raise _refused(
            name,
            f"its zip directory lists {entries:,} members, over the limit of "
            f"{limits.max_members:,}",
        )
    # zipfile parses every entry the directory's bytes hold, whatever count the record states
    if size > limits.max_directory_bytes:
        raise _refused(
            name,
            f"its zip directory takes {size:,} bytes, over the limit of "
            f"{limits.max_directory_bytes:,}",
        )


def _check_members(
    archive: zipfile.ZipFile,
    name: str,
    file_bytes: int,
    limits: ZipLimits,
    only: Collection[str] | None,
) -> None:
    members = archive.infolist()
    if len(members) > limits.max_members:
        raise _refused(
            name, f"it holds {len(members):,} members, over the limit of {limits.max_members:,}"
        )
    total = compressed = 0
    for info in members:
        # Members that overlap, or claim more compressed bytes than the file holds, defeat the
        # ratio check below: their sizes are lies.
        compressed += info.compress_size
        if compressed > file_bytes:
            raise _refused(
                name,
                f"its members claim {compressed:,} compressed bytes (by {info.filename!r}), "
                f"more than the file's {file_bytes:,}",
            )
        if only is not None and info.filename not in only:
            continue
        member, size = info.filename, info.file_size
        if info.flag_bits & 0x1:
            raise SourceError(
                f"{name!r} has an encrypted member {member!r}; save an unprotected copy"
            )
        if info.compress_type not in _READABLE_METHODS:
            raise SourceError(
                f"{name!r} stores its member {member!r} with zip compression method "
                f"{info.compress_type}, which cannot be read; re-save it or remove it"
            )
        if size > limits.max_member_bytes:
            raise _refused(
                name,
                f"its member {member!r} declares {size:,} bytes uncompressed, over the limit "
                f"of {limits.max_member_bytes:,}",
            )
        if size > limits.ratio_grace_bytes and size > limits.max_ratio * info.compress_size:
            raise _refused(
                name,
                f"its member {member!r} inflates {info.compress_size:,} bytes to {size:,}, "
                f"more than {limits.max_ratio} times",
            )
        total += size
        if total > limits.max_total_bytes:
            raise _refused(
                name,
                f"its members declare more than {limits.max_total_bytes:,} bytes uncompressed "
                f"in all ({total:,} by {member!r})",
            )


def _refused(name: str, why: str) -> SourceError:
    return SourceError(
        f"{name!r} is refused unread: {why} (a zip bomb?); remove it, or split the document "
        "if it is genuine"
    )
