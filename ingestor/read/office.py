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
from typing import Any, BinaryIO

from ingestor.errors import SourceError
from ingestor.read.archive import INFLATE_ERRORS, check_archive
from ingestor.read.htmltext import defuse_html
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
# The three patterns below always match from their opening mark, to its close when there is one
# (group ``closed``/1) else as far as no later mark could close either: each character is looked
# at a bounded number of times. Searching ``<!--.*?-->`` from every ``<!--`` of a text without
# ``-->`` was quadratic, as were the image and bold patterns on runs of their opening marks.
_COMMENT = re.compile(r"<!--(?:(?P<closed>.*?-->)|.*)", re.S)
_IMAGE = re.compile(r"!\[[^\]]*+(?:\](?:\([^)]*+(?P<closed>\))?)?)?")
_BOLD = re.compile(r"\*\*(?:(\S(?:.*?\S)?)\*\*|\S.*)")
_TABLE_SEPARATOR = re.compile(r"^\|?+\s*+:?+-{3,}+:?+\s*+(?:\|\s*+:?+-{3,}+:?+\s*+)*+\|?+\s*+$")
_EMPTY_ROW = re.compile(r"^\|(?:\s*+\|)++\s*+$")
# [^\S\n]: a marker's indent is on its own line (\s* crossed blank lines, quadratic on many).
_BULLET = re.compile(r"^([^\S\n]*+)[*+] ", re.M)
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!<>])")
_BLANKS = re.compile(r"\n{3,}")


def read_office(data: bytes, name: str, suffix: str) -> Extracted:
    """Return a document's Markdown: one part per slide (``slide N``) for .pptx, else one part.

    An Outlook message is two parts, its header (``header``) and its body (``body``).

    Raises:
        SourceError: the file is password-protected, damaged, or markitdown is not installed.
    """
    class_name, kind = _CONVERTERS[suffix]
    if suffix in _ZIP_SUFFIXES:
        if data.startswith(_OLE_MAGIC):
            raise SourceError(f"{name!r} is password-protected; save an unprotected copy")
        # python-pptx loads every part, media included, and the EPUB converter every chapter:
        # what the zip declares is checked before either inflates a byte.
        check_archive(data, name, kind)
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
    if suffix == ".epub":
        converter._html_converter = _defused_html_converter()
    # The converters' libraries (python-pptx, olefile, lxml, bs4, json) raise their own
    # and the built-in errors for damaged files; all of them mean "cannot be read" here.
    damaged: tuple[type[BaseException], ...] = (
        MarkItDownException,
        *INFLATE_ERRORS,
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
    )
    try:
        result = converter.convert(io.BytesIO(data), StreamInfo(extension=suffix))
    except MissingDependencyException as exc:
        raise SourceError(
            f"{name!r} needs a markitdown extra that is not installed; pip install adrap again"
        ) from exc
    except damaged as exc:
        message = " ".join(str(exc).split())[:160]
        raise SourceError(
            f"{name!r} is not a readable {kind} ({type(exc).__name__}: {message}); "
            "re-save it or remove it"
        ) from exc
    return str(result.markdown or "")


def _defused_html_converter() -> object:
    """markitdown's HTML converter, fed each chapter through :func:`defuse_html` first: it parses
    with Python's HTMLParser, which a chapter of unclosed ``<a`` holds for hours."""
    from markitdown.converters import HtmlConverter

    class DefusedHtmlConverter(HtmlConverter):
        def convert(self, file_stream: BinaryIO, stream_info: Any, **kwargs: Any) -> Any:
            html = file_stream.read().decode(stream_info.charset or "utf-8", errors="replace")
            defused = io.BytesIO(defuse_html(html).encode("utf-8"))
            return super().convert(defused, stream_info.copy_and_update(charset="utf-8"), **kwargs)

    return DefusedHtmlConverter()


def _library_error() -> type[Exception]:
    """python-pptx's own base error (it derives from Exception, not a built-in error)."""
    try:
        from pptx.exc import PythonPptxError
    except ImportError:  # pragma: no cover
        return SourceError
    return PythonPptxError


def clean_markdown(markdown: str) -> str:
    """Return converter Markdown without noise, bullets as ``- `` and blank lines collapsed."""
    text = _COMMENT.sub(_drop_closed, _IMAGE.sub(_drop_closed, markdown))
    lines = [
        line.rstrip()
        for line in text.splitlines()
        if not _TABLE_SEPARATOR.match(line) and not _EMPTY_ROW.match(line)
    ]
    text = _BULLET.sub(r"\1- ", _BOLD.sub(_unbold, "\n".join(lines)))
    text = _ESCAPE.sub(r"\1", text)
    return _BLANKS.sub("\n\n", text).strip()


def _drop_closed(match: re.Match[str]) -> str:
    """A comment or image that is closed goes; an unclosed opening mark stays as written."""
    return "" if match.group("closed") is not None else match.group()


def _unbold(match: re.Match[str]) -> str:
    """``**word**`` gives ``word``; ``**`` without a closing pair on its line stays."""
    inner = match.group(1)
    return match.group() if inner is None else inner


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
