"""Read documents from the watched folder: bytes → hash + normalised text.

Formats: plain text (.txt .md .markdown .rst), HTML (.html .htm, text extracted with the stdlib
parser) and PDF (its text layer, via pypdf). Every failure is a one-line ``SourceError`` naming the
file, the reason and the fix; the daemon logs it and skips the file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ingestor.errors import SourceError, SourceUnavailableError
from ingestor.read import formats
from ingestor.read.listing import DEFAULT_IGNORE, iter_files, source_name
from ingestor.read.names import source_text
from ingestor.read.opening import open_inside, refuse_special
from ingestor.read.structure import join_normalised

__all__ = [
    "SUPPORTED_SUFFIXES",
    "Document",
    "ReadOptions",
    "ReadTask",
    "ReadThen",
    "iter_documents",
    "list_documents",
    "normalise_text",
    "read_document",
    "read_listed",
    "read_then",
    "read_then_many",
]

log = logging.getLogger(__name__)

SUPPORTED_SUFFIXES: frozenset[str] = formats.SUPPORTED_SUFFIXES

_SIZE_SETTING = "ADRAP_READ__MAX_FILE_BYTES"
#: The coarsest modification-time granularity of the filesystems a share lives on (FAT, SMB).
COARSE_MTIME_SECONDS = 2.0


@dataclass(frozen=True)
class Document:
    """One file's text, ready to chunk.

    Attributes:
        source: path relative to the root, with POSIX separators (``reports/q3.md``).
        text: normalised text (see ``normalise_text``), never empty.
        content_hash: sha256 hex digest of the raw file bytes the text was decoded from.
        size: number of bytes read.
        mtime: modification time, seconds since the epoch.
        mtime_ns: modification time, nanoseconds (exact; with ``size`` and ``inode`` it tells an
            unchanged file without reading it).
        inode: the file's inode number (``st_ino``).
        encoding: the encoding a text file was decoded with (``utf-8``, ``cp1252``); None for
            binary formats.
        regions: ``(offset in text, locator)`` where each located part of the file starts
            (``page 3``, ``slide 2``, ``Budget!A5:D5``); see :mod:`ingestor.read.structure`.
        ctime_ns: the inode's change time, nanoseconds (``st_ctime_ns``; 0: not trusted, as
            ``mtime_ns``). Every write moves it and nothing sets it back, so an edit whose mtime
            was restored (``cp -p``, ``tar``, ``rsync -t``, a backup restore) still shows.
    """

    source: str
    text: str
    content_hash: str
    size: int
    mtime: float
    mtime_ns: int = 0
    inode: int = 0
    encoding: str | None = None
    regions: tuple[tuple[int, str], ...] = ()
    ctime_ns: int = 0


def normalise_text(text: str) -> str:
    """Normalise whitespace as adRAP App. H.5 does: paragraphs separated by exactly one blank line.

    ``\\r\\n``, ``\\r`` and the other line separators become ``\\n`` (form feed and U+2029 mark a
    paragraph); trailing whitespace is stripped from each line; runs of blank lines collapse to one;
    single newlines inside a paragraph stay; NUL characters are removed; the result is stripped.
    The function is idempotent.
    """
    text = text.replace("\x00", "")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    # str.splitlines() treats these as line breaks too; make them explicit so nothing else does.
    text = text.translate(_LINE_BREAKS)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()


_LINE_BREAKS = str.maketrans(
    {
        "\v": "\n",
        "\x1c": "\n",
        "\x1d": "\n",
        "\x1e": "\n",
        "\x85": "\n",
        "\u2028": "\n",
        "\f": "\n\n",
        "\u2029": "\n\n",
    }
)
_BLANK_LINES = re.compile(r"\n{2,}")


def read_document(
    path: Path,
    root: Path,
    *,
    max_bytes: int,
    ocr: bool = False,
    text_suffixes: Collection[str] = (),
) -> Document:
    """Read one file under ``root`` and return its normalised text and content hash.

    The file is opened once, so the hash and the text come from the same bytes, and opened
    through its resolved path walked from ``root`` with no symlink at any component
    (:func:`~ingestor.read.opening.open_inside`): a symlink is followed only while its target
    stays inside ``root``, and a folder swapped for a link mid-read is never followed out. The
    converters get the bytes, never the path. ``Document.source`` is the path under ``root``
    as text (:func:`~ingestor.read.names.source_text`: a name that is not UTF-8 is escaped).

    Args:
        path: the file, absolute or relative to the working directory.
        root: the watched folder; ``Document.source`` is relative to it.
        max_bytes: files larger than this are refused (setting ``ADRAP_READ__MAX_FILE_BYTES``).
        ocr: read images and scanned PDF pages with tesseract (``ADRAP_READ__OCR``).
        text_suffixes: more suffixes read as plain text (``ADRAP_READ__TEXT_SUFFIXES``).

    Raises:
        SourceError: the file is unsupported, too large, unreadable, undecodable, binary, empty,
            outside ``root``, or not a regular file. The message is one line.
        ValueError: ``max_bytes`` is smaller than 1.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
    source = source_name(path, root)
    name = source or source_text(str(path))
    suffix = path.suffix.lower()
    extra = {x.lower() if x.startswith(".") else "." + x.lower() for x in text_suffixes}
    if suffix in formats.IMAGE_SUFFIXES and not ocr:
        raise SourceError(
            f"{name!r} is an image; OCR is off: set ADRAP_READ__OCR=true (see docs/formats.md)"
        )
    if suffix not in SUPPORTED_SUFFIXES and suffix not in extra and not ocr:
        refuse_special(path, root, name)  # a pipe or a bad link says so, not its suffix
        raise SourceError(
            f"{name!r} has unsupported type {suffix or '(no suffix)'!r} (docs/formats.md lists "
            "what is read); if it is plain text add it to ADRAP_READ__TEXT_SUFFIXES, else convert "
            "it or add a pattern to ADRAP_READ__IGNORE"
        )
    if source is None:
        raise SourceError(
            f"{name!r} is not inside the root {source_text(str(root))!r}; move it into the folder"
        )
    data, st = _read_bytes(path, root, name, max_bytes)
    extracted = _extracted(data, name, suffix, ocr, extra)
    text, regions = join_normalised(extracted.parts, normalise_text)
    if not text:
        raise SourceError(
            f"{name!r} has no text (empty or only whitespace); add text or remove the file"
        )
    # Racily clean (git's term): a file written within the filesystem's mtime granularity of
    # this read (2 s on SMB and FAT) may change again without its mtime moving; 0 says "read
    # it to compare its hash" next time, instead of trusting (size, mtime, inode, ctime).
    racy = time.time() - st.st_mtime < COARSE_MTIME_SECONDS
    return Document(
        source=source,
        text=text,
        content_hash=hashlib.sha256(data).hexdigest(),
        size=len(data),
        mtime=st.st_mtime,
        mtime_ns=0 if racy else st.st_mtime_ns,
        inode=st.st_ino,
        ctime_ns=0 if racy else st.st_ctime_ns,
        encoding=extracted.encoding,
        regions=regions,
    )


def _extracted(
    data: bytes, name: str, suffix: str, ocr: bool, extra: Collection[str]
) -> formats.Extracted:
    """:func:`formats.extract`, where a converter that fails on the file's content is the
    file's failure (skipped, saying why), never the build's: one bad file never stops the others.

    A mail nested 3,000 multiparts deep made the standard library's parser recurse past Python's
    stack, and the RecursionError stopped `adrap build` (and a daemon's first build: a restart
    loop) over a share holding one 150 KB `.eml`."""
    try:
        return formats.extract(data, name, suffix, ocr=ocr, text_suffixes=extra)
    except SourceError:
        raise
    except RecursionError as exc:
        raise SourceError(
            f"{name!r} nests deeper than its {suffix or 'text'} reader can follow; flatten or "
            "remove it (it is read again when it changes)"
        ) from exc
    except MemoryError:
        raise  # the reader process's budget says why (ingestor.pipeline.budget)
    except Exception as exc:
        raise SourceError(
            f"{name!r} cannot be read: its {suffix or 'text'} reader failed "
            f"({type(exc).__name__}: {str(exc)[:200]}); it is read again when it changes; if "
            "it opens in its own application, report it with the file"
        ) from exc


@dataclass(frozen=True)
class ReadOptions:
    """How files are read (the ``ADRAP_READ__*`` settings of :func:`read_document`)."""

    max_bytes: int
    ocr: bool = False
    text_suffixes: tuple[str, ...] = ()

    def read(self, path: Path, root: Path) -> Document:
        """:func:`read_document` of ``path`` under ``root`` with these options."""
        return read_document(
            path, root, max_bytes=self.max_bytes, ocr=self.ocr, text_suffixes=self.text_suffixes
        )


def list_documents(
    root: Path, *, ignore: Sequence[str] = DEFAULT_IGNORE
) -> Iterator[tuple[Path, SourceError | None]]:
    """List what :func:`iter_documents` reads, reading nothing: ``(path, None)`` per file,
    ``(path, SourceError)`` per folder that cannot be listed; ``root`` itself when it is a file.

    Raises:
        SourceError: ``root`` itself does not exist or cannot be listed.
    """
    if root.is_file():
        yield root, None
        return
    yield from iter_files(root, ignore=ignore)


def read_listed(
    path: Path, root: Path, error: SourceError | None, options: ReadOptions
) -> Document | SourceError:
    """Read one entry of :func:`list_documents`: its document, or why it was skipped (the
    listing's own error for a folder; :func:`read_document`'s for a file). Never raises
    SourceError, so a caller reading many files carries on."""
    if error is not None:
        return error
    base = root.parent if root.is_file() else root
    try:
        return options.read(path, base)
    except SourceError as exc:
        return exc


T = TypeVar("T")
#: A listed file to read: its path, the root, the listing's error, the options, ``then``.
ReadTask = tuple[Path, Path, SourceError | None, ReadOptions, Callable[["Document"], T]]
#: A listed file read: its path, its document or why it was skipped, and ``then(document)``.
ReadThen = tuple[Path, "Document | SourceError", T | None]


def read_then(task: ReadTask[T]) -> ReadThen[T]:
    """Read one listed file and apply ``then`` to its document: a build's read task, run by
    its worker processes (this module imports nothing heavy)."""
    path, root, error, options, then = task
    try:
        item = read_listed(path, root, error, options)
        if isinstance(item, SourceError):
            return path, item, None
        return path, item, then(item)
    except Exception as exc:  # not a skip: a bug, which stops the build; say where
        exc.add_note(f"while reading {source_text(str(path))!r}")
        raise


def read_then_many(tasks: Sequence[ReadTask[T]]) -> list[ReadThen[T]]:
    """:func:`read_then` of each task, in order (a worker's task of a few files)."""
    return [read_then(task) for task in tasks]


def iter_documents(
    root: Path,
    *,
    max_bytes: int,
    ignore: Sequence[str] = DEFAULT_IGNORE,
    ocr: bool = False,
    text_suffixes: Collection[str] = (),
) -> Iterator[tuple[Path, Document | SourceError]]:
    """Walk ``root`` in sorted order and read every file not matched by ``ignore``.

    Yields one ``(path, Document)`` per readable file and one ``(path, SourceError)`` per file or
    directory that was skipped, so the caller logs one line each and carries on. ``ignore`` holds
    glob patterns matched against each file and directory name (``.*`` also skips ``.git/``).
    Symlinked directories are followed only while they stay inside ``root`` and do not loop back to
    a directory being walked. ``root`` may also be a single file (its source is its name).

    Raises:
        SourceError: ``root`` itself does not exist or cannot be listed.
    """
    options = ReadOptions(max_bytes, ocr, tuple(text_suffixes))
    for path, error in list_documents(root, ignore=ignore):
        yield path, read_listed(path, root, error, options)


def _read_bytes(path: Path, root: Path, name: str, max_bytes: int) -> tuple[bytes, os.stat_result]:
    fd, st = open_inside(path, root, name)  # walked from the root: nothing outside it is opened
    try:
        with os.fdopen(fd, "rb") as f:
            if st.st_size > max_bytes:
                raise _too_large(name, st.st_size, max_bytes)
            # read one byte past the limit: the file may have grown since fstat
            data = f.read(max_bytes + 1)
    except OSError as exc:
        # EBUSY (a document open in Word on an SMB share), EIO (a flaky mount), ESTALE, ...
        raise SourceUnavailableError(
            f"{name!r} cannot be read now ({exc.strerror or exc}); what was read before is kept "
            "and it is tried again"
        ) from exc
    if len(data) > max_bytes:
        raise _too_large(name, len(data), max_bytes)
    return data, st


def _too_large(name: str, size: int, max_bytes: int) -> SourceError:
    return SourceError(
        f"{name!r} is {size:,} bytes, over the limit of {max_bytes:,}; "
        f"raise {_SIZE_SETTING} or split the file"
    )
