"""PowerPoint, EPUB, Outlook .msg and Jupyter notebooks through markitdown's converters (MIT).

Each suffix goes straight to its converter with a ``StreamInfo`` naming the extension: no content
sniffing (magika) and no fallback to another converter, so a damaged ``.pptx`` is an error rather
than its zip listing, and nothing is fetched (plugins, LLM captions and URLs are never used).
Their Markdown is cleaned of what a summary would pick up as noise: image placeholders, HTML
comments, table separator lines, empty table rows, Markdown escapes.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile

from ingestor.errors import SourceError
from ingestor.read.parts import Extracted, Part

__all__ = ["OFFICE_SUFFIXES", "clean_markdown", "read_office"]

log = logging.getLogger(__name__)

# suffix → (markitdown converter class, what to call the file in messages)
_CONVERTERS = {
    ".pptx": ("PptxConverter", "PowerPoint presentation"),
    ".epub": ("EpubConverter", "EPUB e-book"),
    ".msg": ("OutlookMsgConverter", "Outlook message"),
    ".ipynb": ("IpynbConverter", "Jupyter notebook"),
}
OFFICE_SUFFIXES = frozenset(_CONVERTERS)
# An encrypted OOXML file is an OLE compound file holding the encrypted package, not a zip.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ZIP_SUFFIXES = frozenset({".pptx", ".epub"})
_SLIDE = re.compile(r"^<!-- Slide number: (\d+) -->$", re.M)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_TABLE_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_EMPTY_ROW = re.compile(r"^\|(\s*\|)+\s*$")
_BULLET = re.compile(r"^(\s*)[*+] ", re.M)
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!<>])")
_BOLD = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*")
_BLANKS = re.compile(r"\n{3,}")


def read_office(data: bytes, name: str, suffix: str) -> Extracted:
    """Return a document's Markdown: one part per slide (``slide N``) for .pptx, else one part.

    An Outlook message is two parts, its header (``header``) and its body (``body``).

    Raises:
        SourceError: the file is password-protected, damaged, or markitdown is not installed.
    """
    class_name, kind = _CONVERTERS[suffix]
    if suffix in _ZIP_SUFFIXES and data.startswith(_OLE_MAGIC):
        raise SourceError(f"{name!r} is password-protected; save an unprotected copy")
    markdown = _convert(data, name, suffix, class_name, kind)
    if suffix == ".pptx":
        return Extracted(_slides(markdown))
    if suffix == ".msg":
        return Extracted(_message(markdown))
    text = clean_markdown(markdown)
    return Extracted((Part(text),) if text else ())


def _convert(data: bytes, name: str, suffix: str, class_name: str, kind: str) -> str:
    try:
        from markitdown import MissingDependencyException, StreamInfo, converters
        from markitdown._exceptions import MarkItDownException
    except ImportError as exc:  # pragma: no cover - a dependency of the default install
        raise SourceError(
            f"{name!r} needs markitdown, which is not installed; pip install adrap again"
        ) from exc
    converter = getattr(converters, class_name)()
    try:
        result = converter.convert(io.BytesIO(data), StreamInfo(extension=suffix))
    except MissingDependencyException as exc:
        raise SourceError(
            f"{name!r} needs a markitdown extra that is not installed; pip install adrap again"
        ) from exc
    # The converters' libraries (python-pptx, olefile, lxml, bs4, json) raise their own
    # and the built-in errors for damaged files; all of them mean "cannot be read" here.
    except (
        MarkItDownException,
        zipfile.BadZipFile,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        LookupError,
        AssertionError,
        SyntaxError,
        RecursionError,
        OSError,
        _library_error(),
    ) as exc:
        message = " ".join(str(exc).split())[:160]
        raise SourceError(
            f"{name!r} is not a readable {kind} ({type(exc).__name__}: {message}); "
            "re-save it or remove it"
        ) from exc
    return str(result.markdown or "")


def _library_error() -> type[Exception]:
    """python-pptx's own base error (it derives from Exception, not a built-in error)."""
    try:
        from pptx.exc import PythonPptxError
    except ImportError:  # pragma: no cover
        return SourceError
    return PythonPptxError


def clean_markdown(markdown: str) -> str:
    """Return converter Markdown without noise, bullets as ``- `` and blank lines collapsed."""
    text = _COMMENT.sub("", _IMAGE.sub("", markdown))
    lines = [
        line.rstrip()
        for line in text.splitlines()
        if not _TABLE_SEPARATOR.match(line) and not _EMPTY_ROW.match(line)
    ]
    text = _BULLET.sub(r"\1- ", _BOLD.sub(r"\1", "\n".join(lines)))
    text = _ESCAPE.sub(r"\1", text)
    return _BLANKS.sub("\n\n", text).strip()


def _slides(markdown: str) -> tuple[Part, ...]:
    pieces = _SLIDE.split(markdown)
    parts = []
    # split() gives [before, number, text, number, text, ...]
    for number, text in zip(pieces[1::2], pieces[2::2], strict=True):
        cleaned = clean_markdown(text)
        if cleaned:
            parts.append(Part(cleaned, f"slide {number}"))
    return tuple(parts)


def _message(markdown: str) -> tuple[Part, ...]:
    head, _, body = markdown.partition("## Content")
    header = clean_markdown(head.replace("# Email Message", "", 1))
    parts = [Part(header, "header")] if header else []
    body = clean_markdown(body)
    if body:
        parts.append(Part(body, "body"))
    return tuple(parts)
