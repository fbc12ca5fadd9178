"""Text files: the encoding (BOM, UTF-8, a declared HTML charset, else detected), then the structure.

Plain text is one part. CSV/TSV is a table, one part per row (locator ``row N``). JSON is
pretty-printed (a top-level array: one part per item, ``item N``); JSON Lines is one part per
record (``line N``). Invalid JSON is read as plain text. Bounds (docs/formats.md): a CSV field
holds at most 128 KiB (the csv module's limit: past it the file is refused); JSON nested deeper
than the parser's recursion limit is read as plain text, and a value nested deeper than
``MAX_PRETTY_DEPTH`` is written on one line instead of indented.
"""

from __future__ import annotations

import codecs
import csv
import json
import logging
import re

from ingestor.errors import SourceError
from ingestor.read.delimiter import sniff_delimiter
from ingestor.read.parts import Extracted, Part, table_row

__all__ = ["MAX_PRETTY_DEPTH", "decode", "read_csv", "read_json", "read_jsonl", "read_plain"]

log = logging.getLogger(__name__)

# UTF-32 first: its little-endian BOM starts with the UTF-16 one.
_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig", "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32", "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32", "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16", "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16", "utf-16"),
)
# The HTML spec's encoding prescan looks at the first 1024 bytes for a declared charset.
# Searched in those 1024 bytes only; possessive: the spaces around an optional quote split one way.
_HTML_CHARSET = re.compile(rb"""<meta[^>]+charset\s*+=\s*+["']?+\s*+([A-Za-z0-9._:-]+)""", re.I)
# Without a BOM these are guesses charset-normalizer makes for short Latin texts ("café" came back
# as UTF-16-BE); text in them has NUL bytes, which are refused before detection anyway.
_NEVER_GUESSED = ["utf_16", "utf_16_be", "utf_16_le", "utf_32", "utf_32_be", "utf_32_le", "utf_7"]
# C0 controls other than tab, newlines, vertical tab, form feed and escape (colour codes in logs):
# binary if more than 1 in 100 characters.
_CONTROL = re.compile(r"[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f]")
_DETECT_BYTES = 256 * 1024
#: JSON nested deeper than this is written compact: indenting a value d levels deep writes 2*d
#: spaces on each of its lines, so ``[[[...]]]`` 990 deep (2 KB) grew to 2 MB of spaces.
MAX_PRETTY_DEPTH = 10


def decode(data: bytes, name: str, *, html: bool = False) -> tuple[str, str]:
    """Return ``(text, encoding)`` of a text file's bytes.

    Order: a byte-order mark, then strict UTF-8, then (HTML only) the charset its ``<meta>``
    declares, then detection by charset-normalizer. Where detection finds no language evidence,
    or Windows-1252 fits as well as its best guess, Windows-1252 is assumed: the most common
    legacy encoding, a superset of Latin-1's printable characters.

    Raises:
        SourceError: the bytes hold NUL bytes or control characters (binary), are invalid in the
            encoding their BOM or ``<meta>`` names, or no encoding fits them.
    """
    for bom, codec, label in _BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(codec)
            except UnicodeDecodeError as exc:
                raise SourceError(
                    f"{name!r} starts with a {label.upper()} byte-order mark but is not valid "
                    f"{label.upper()} (byte {exc.start}); re-save it as UTF-8"
                ) from exc
            return _checked(text, name), label
    if b"\x00" in data:
        raise _binary(name)
    try:
        return _checked(data.decode("utf-8"), name), "utf-8"
    except UnicodeDecodeError:
        pass
    declared = _declared_charset(data) if html else None
    if declared is not None:
        try:
            return _checked(data.decode(declared), name), declared
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"{name!r} declares charset {declared!r} but is not valid in it "
                f"(byte {exc.start}); re-save it as UTF-8"
            ) from exc
    encoding = _detect(data, name)
    return _checked(data.decode(encoding, errors="replace"), name), encoding


def _detect(data: bytes, name: str) -> str:
    from charset_normalizer import from_bytes  # imported here: only legacy-encoded files need it

    # Detection reads a prefix: a megabyte of one encoding does not change the verdict.
    results = from_bytes(data[:_DETECT_BYTES], cp_exclusion=_NEVER_GUESSED)
    best = results.best()
    if best is None:
        raise SourceError(
            f"{name!r} is neither UTF-8 nor any text encoding that could be detected (binary?); "
            "re-save it as UTF-8 text or remove it"
        )
    try:
        data.decode("cp1252")
    except UnicodeDecodeError:
        return codecs.lookup(best.encoding).name
    cp1252_fits = any(
        r.encoding == "cp1252" and r.chaos <= best.chaos and r.coherence >= best.coherence
        for r in results
    )
    if best.coherence == 0 or cp1252_fits or best.encoding in {"latin_1", "iso8859_15"}:
        return "cp1252"
    return codecs.lookup(best.encoding).name


def _checked(text: str, name: str) -> str:
    if "\x00" in text or len(_CONTROL.findall(text[:65536])) * 100 > min(len(text), 65536):
        raise _binary(name)
    return text


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
        f"{name!r} contains NUL bytes or control characters, so it is binary, not text; "
        "rename it or remove it"
    )


def read_plain(data: bytes, name: str) -> Extracted:
    """Return a plain text file as one part."""
    text, encoding = decode(data, name)
    return Extracted((Part(text),), encoding)


def read_csv(data: bytes, name: str, *, delimiter: str | None = None) -> Extracted:
    """Return a CSV/TSV file as a table: one ``| a | b |`` part per non-empty row, ``row N``.

    ``delimiter`` None sniffs it among ``, ; <tab> |`` (a comma when the sniffer cannot tell).
    ``N`` counts records from 1, blank ones included, as a spreadsheet numbers them.
    """
    text, encoding = decode(data, name)
    if delimiter is None:
        # csv.Sniffer's own choice, without its backtracking patterns (ingestor.read.delimiter)
        delimiter = sniff_delimiter(text[:8192], ",;\t|") or ","
    parts: list[Part] = []
    try:
        for number, row in enumerate(csv.reader(text.splitlines(), delimiter=delimiter), 1):
            if any(cell.strip() for cell in row):
                parts.append(Part(table_row(row), f"row {number}", continues=bool(parts)))
    except csv.Error as exc:
        raise SourceError(
            f"{name!r} is not readable as CSV ({exc}); fix the quoting or rename it to .txt"
        ) from exc
    return Extracted(tuple(parts), encoding)


def read_json(data: bytes, name: str) -> Extracted:
    """Return JSON pretty-printed: one part, or one per item (``item N``) of a top-level array."""
    text, encoding = decode(data, name)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        log.debug("%s is not valid JSON; read as plain text", name)
        return Extracted((Part(text),), encoding)
    if isinstance(value, list) and value:
        return Extracted(
            tuple(Part(_pretty(item), f"item {i}") for i, item in enumerate(value, 1)), encoding
        )
    return Extracted((Part(_pretty(value)),), encoding)


def read_jsonl(data: bytes, name: str) -> Extracted:
    """Return JSON Lines as one pretty-printed part per record (``line N``; invalid lines as text)."""
    text, encoding = decode(data, name)
    parts: list[Part] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            parts.append(Part(_pretty(json.loads(line)), f"line {number}"))
        except (ValueError, RecursionError):
            parts.append(Part(line, f"line {number}"))
    return Extracted(tuple(parts), encoding)


def _pretty(value: object) -> str:
    if isinstance(value, str):
        return value
    indent = 2 if _depth_at_most(value, MAX_PRETTY_DEPTH) else None
    return json.dumps(value, indent=indent, ensure_ascii=False)


def _depth_at_most(value: object, limit: int) -> bool:
    """Whether ``value`` nests at most ``limit`` arrays/objects deep (iterative: no recursion)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth >= limit:
                return False
            stack.extend((child, depth + 1) for child in item)
    return True
