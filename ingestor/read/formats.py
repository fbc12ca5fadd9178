"""Text out of a file's bytes, by format, as located Markdown-like parts.

``extract(data, name, suffix)`` picks the reader for the suffix. Every failure is a one-line
``SourceError`` naming the file, the reason and the fix; no library exception leaves a reader.
Readers are imported on first use, so a folder of text files never loads an office library.
See docs/formats.md for what each format gives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from ingestor.errors import SourceError
from ingestor.read import textfile
from ingestor.read.htmltext import html_to_text
from ingestor.read.parts import Extracted, Part, join_parts

__all__ = [
    "HTML_SUFFIXES",
    "IMAGE_SUFFIXES",
    "SUPPORTED_SUFFIXES",
    "TEXT_SUFFIXES",
    "Extracted",
    "Part",
    "extract",
    "extract_text",
]

log = logging.getLogger(__name__)

HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
# Read as plain text, one part: prose and markup whose raw text is what a reader sees.
TEXT_SUFFIXES = frozenset(
    {
        ".txt", ".text", ".md", ".markdown", ".rst", ".adoc", ".asciidoc", ".org", ".tex",
        ".xml", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".properties",
        ".ics", ".vcf", ".log", ".srt", ".vtt",
    }
)  # fmt: skip
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp"})
# Attachments nested this deep (a mail in a mail in a mail) are skipped, not read.
MAX_DEPTH = 3

_Reader = Callable[[bytes, str, bool, int], Extracted]


def _plain(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    return textfile.read_plain(data, name)


def _html(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    text, encoding = textfile.decode(data, name, html=True)
    return Extracted((Part(html_to_text(text)),), encoding)


def _csv(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    return textfile.read_csv(data, name)


def _tsv(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    return textfile.read_csv(data, name, delimiter="\t")


def _json(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    return textfile.read_json(data, name)


def _jsonl(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    return textfile.read_jsonl(data, name)


def _pdf(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    from ingestor.read.pdf import read_pdf

    return read_pdf(data, name, ocr=ocr)


def _image(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    if not ocr:
        raise SourceError(
            f"{name!r} is an image; OCR is off: set ADRAP_READ__OCR=true (see docs/formats.md)"
        )
    from ingestor.read.ocr import ocr_image_bytes

    text = ocr_image_bytes(data, name)
    if not text.strip():
        raise SourceError(
            f"{name!r} is an image in which OCR found no text; remove it or ignore it"
        )
    return Extracted((Part(text),))


def _office(suffix: str) -> _Reader:
    def read(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
        from ingestor.read.office import read_office

        return read_office(data, name, suffix)

    return read


def _odf(suffix: str) -> _Reader:
    def read(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
        from ingestor.read.odf import read_odf

        return read_odf(data, name, suffix)

    return read


def _docx(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    from ingestor.read.docx import read_docx

    return read_docx(data, name)


def _xlsx(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    from ingestor.read.spreadsheet import read_xlsx

    return read_xlsx(data, name)


def _xls(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    from ingestor.read.spreadsheet import read_xls

    return read_xls(data, name)


def _rtf(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    from ingestor.read.rtf import read_rtf

    return read_rtf(data, name)


def _eml(data: bytes, name: str, ocr: bool, depth: int) -> Extracted:
    from ingestor.read.mail import read_eml

    def read_attachment(payload: bytes, attachment: str, suffix: str) -> Extracted:
        return _extract(payload, attachment, suffix, ocr, depth + 1, frozenset())

    return read_eml(data, name, read_attachment if depth + 1 < MAX_DEPTH else None)


_READERS: dict[str, _Reader] = {
    **dict.fromkeys(TEXT_SUFFIXES, _plain),
    **dict.fromkeys(HTML_SUFFIXES, _html),
    ".csv": _csv,
    ".tsv": _tsv,
    ".tab": _tsv,
    ".json": _json,
    ".jsonl": _jsonl,
    ".ndjson": _jsonl,
    ".pdf": _pdf,
    **{suffix: _office(suffix) for suffix in (".pptx", ".epub", ".msg", ".ipynb")},
    ".docx": _docx,
    ".docm": _docx,
    **{suffix: _odf(suffix) for suffix in (".odt", ".ods", ".odp")},
    ".xlsx": _xlsx,
    ".xlsm": _xlsx,
    ".xls": _xls,
    ".rtf": _rtf,
    ".eml": _eml,
    **dict.fromkeys(IMAGE_SUFFIXES, _image),
}
SUPPORTED_SUFFIXES: frozenset[str] = frozenset(_READERS) - IMAGE_SUFFIXES


def extract(
    data: bytes,
    name: str,
    suffix: str,
    *,
    ocr: bool = False,
    text_suffixes: Collection[str] = (),
) -> Extracted:
    """Return the text of a file's ``data`` as located parts, read by the format of ``suffix``.

    Args:
        data: the file's bytes.
        name: the file's name as messages show it (its path relative to the watched folder).
        suffix: lower-case, with the dot (``".docx"``).
        ocr: read images, and PDF pages without a text layer, with tesseract.
        text_suffixes: more suffixes to read as plain text (``{".py", ".sql"}``).

    Raises:
        SourceError: the suffix is unsupported, or the file is binary, undecodable, encrypted,
            malformed, an image with OCR off, or has no text. The message is one line.
    """
    return _extract(data, name, suffix.lower(), ocr, 0, frozenset(text_suffixes))


def _extract(
    data: bytes, name: str, suffix: str, ocr: bool, depth: int, text_suffixes: frozenset[str]
) -> Extracted:
    reader = _READERS.get(suffix)
    if reader is None:
        if suffix not in text_suffixes:
            supported = " ".join(sorted(SUPPORTED_SUFFIXES))
            raise SourceError(
                f"{name!r} has unsupported type {suffix or '(no suffix)'!r} "
                f"(supported: {supported}); convert it or add a pattern to ADRAP_READ__IGNORE"
            )
        reader = _plain
    return reader(data, name, ocr, depth)


def extract_text(data: bytes, name: str, suffix: str) -> str:
    """Return the text of a file's ``data``: ``extract``'s parts joined (not yet normalised).

    Raises:
        SourceError: as ``extract``.
    """
    return join_parts(extract(data, name, suffix).parts)
