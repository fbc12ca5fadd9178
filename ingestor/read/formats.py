"""Text out of a file's bytes, by format: plain text (BOM/UTF-8/declared charset), HTML, PDF.

Every failure is a one-line ``SourceError`` naming the file, the reason and the fix.
"""

from __future__ import annotations

import codecs
import io
import logging
import re
from html.parser import HTMLParser

from ingestor.errors import SourceError

log = logging.getLogger(__name__)

HTML_SUFFIXES = frozenset({".html", ".htm"})
# UTF-32 first: its little-endian BOM starts with the UTF-16 one.
_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# The HTML spec's encoding prescan looks at the first 1024 bytes for a declared charset.
_HTML_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)


def extract_text(data: bytes, name: str, suffix: str) -> str:
    """Return the text of a file's ``data`` according to its ``suffix`` (not yet normalised).

    Raises:
        SourceError: the bytes are binary, undecodable, or a PDF without a readable text layer.
    """
    if suffix == ".pdf":
        return _pdf_text(data, name)
    text = _decode(data, name, html=suffix in HTML_SUFFIXES)
    return _html_to_text(text) if suffix in HTML_SUFFIXES else text


def _decode(data: bytes, name: str, *, html: bool) -> str:
    """Decode text strictly: a BOM's encoding, else UTF-8, else (HTML only) a declared charset.

    There is no latin-1/cp1252 guess: those decode any bytes, so a wrong guess would be stored and
    embedded as mojibake without anyone noticing. A clear error lets the owner re-save the file.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise SourceError(
                    f"{name!r} starts with a {encoding.upper()} byte-order mark but is not valid "
                    f"{encoding.upper()} (byte {exc.start}); re-save it as UTF-8"
                ) from exc
            if "\x00" in text:
                raise _binary(name)
            return text
    if b"\x00" in data:
        raise _binary(name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        declared = _declared_charset(data) if html else None
        if declared is not None:
            try:
                return data.decode(declared)
            except UnicodeDecodeError as exc2:
                raise SourceError(
                    f"{name!r} declares charset {declared!r} but is not valid in it "
                    f"(byte {exc2.start}); re-save it as UTF-8"
                ) from exc2
        raise SourceError(
            f"{name!r} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "re-save it as UTF-8"
        ) from exc


def _declared_charset(data: bytes) -> str | None:
    match = _HTML_CHARSET.search(data[:1024])
    if match is None:
        return None
    try:
        return codecs.lookup(match.group(1).decode("ascii")).name
    except LookupError:
        return None


def _binary(name: str) -> SourceError:
    return SourceError(
        f"{name!r} contains NUL bytes, so it is binary, not text; rename it or remove it"
    )


def _pdf_text(data: bytes, name: str) -> str:
    """Return the text layer of a PDF, pages separated by a blank line."""
    # imported here: pypdf is only needed when a folder holds PDFs
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise SourceError(f"{name!r} is an encrypted PDF; save an unencrypted copy")
        pages = [page.extract_text() or "" for page in reader.pages]
    except (FileNotDecryptedError, DependencyError) as exc:
        raise SourceError(f"{name!r} is an encrypted PDF; save an unencrypted copy") from exc
    # pypdf raises its own errors for most damage, but plain ValueError/KeyError/TypeError and
    # friends escape it for some malformed objects; all of them mean "corrupt file" here.
    except (
        PyPdfError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        AttributeError,
        AssertionError,
        RecursionError,
        OSError,
    ) as exc:
        raise SourceError(
            f"{name!r} is not a readable PDF ({type(exc).__name__}: {_one_line(exc)}); "
            "re-export it or remove it"
        ) from exc
    text = "\n\n".join(pages)
    if not text.strip():
        raise SourceError(
            f"{name!r} is a PDF with no text layer (a scan?); run OCR on it (e.g. ocrmypdf)"
        )
    return text


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


# HTML ------------------------------------------------------------------------------------------

_SKIP = frozenset({"script", "style", "head", "title", "noscript", "template", "svg", "math"})
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "dialog",
        "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3",
        "h4", "h5", "h6", "header", "hgroup", "hr", "html", "legend", "li", "main", "nav", "ol",
        "p", "pre", "section", "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
    }
)  # fmt: skip
_WS = re.compile(r"\s+")
_SPACES_AROUND_NEWLINE = re.compile(r" *\n *")


class _TextExtractor(HTMLParser):
    """Collect visible text: block elements end paragraphs, ``<br>`` ends a line."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)  # entities arrive unescaped in handle_data
        self.blocks: list[str] = []
        self._pieces: list[str] = []
        self._skip_depth = 0
        self._pre_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip_depth += 1
        elif tag == "body":
            self._skip_depth = 0  # a <head> left open ends where <body> starts
        if tag == "br":
            self._pieces.append("\n")
        elif tag in _BLOCK:
            self._flush()
            if tag == "pre":
                self._pre_depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            return  # <svg/> and friends have no content
        self.handle_starttag(tag, attrs)
        if tag in _BLOCK:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in _BLOCK:
            self._flush()
            if tag == "pre":
                self._pre_depth = max(0, self._pre_depth - 1)
        elif tag in {"td", "th"}:
            self._pieces.append(" ")  # cells of a row stay on one line, apart

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        self._pieces.append(data if self._pre_depth else _WS.sub(" ", data))

    def close(self) -> None:
        super().close()
        self._flush()

    def _flush(self) -> None:
        text = "".join(self._pieces)
        self._pieces.clear()
        if self._pre_depth:
            text = text.strip("\n")
        else:
            text = _SPACES_AROUND_NEWLINE.sub("\n", re.sub(" {2,}", " ", text)).strip()
        if text.strip():
            self.blocks.append(text)


def _html_to_text(html: str) -> str:
    """Return the visible text of an HTML document, one paragraph per block element.

    Contents of ``script``, ``style``, ``head`` (with ``title``), ``noscript`` and ``template`` are
    dropped, entities are unescaped, whitespace collapses as a browser would except inside
    ``<pre>``. ``<br>`` ends a line (two of them end a paragraph).
    """
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return "\n\n".join(parser.blocks)
