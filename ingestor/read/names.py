"""File names as text: a name that is not valid UTF-8 gets a reversible ``\\xNN`` escape.

A share written by old clients holds names in Latin-1 or CP437 (``caf\\xe9.txt`` as bytes).
Python lists them with ``surrogateescape``: each byte that is not UTF-8 becomes a lone
surrogate (U+DC80-U+DCFF), which SQLite, JSON encoders writing UTF-8, Qdrant's payloads and
log files all refuse. So a file's **source** (its path relative to the root: the key of the
tree's state, the payload of its points, what ``/status`` and the dashboard show) is never the
raw name but :func:`source_text` of it:

* every byte that is not part of valid UTF-8 is written ``\\xNN`` (two lower-case hex digits);
* a backslash that would otherwise read as the start of an escape (followed by another
  backslash, by ``x`` and two hex digits, or by such a byte) is doubled;
* everything else stays as it is, so every valid UTF-8 name without such backslashes (all but
  the oddest) is its own source, as before.

:func:`fs_name` reverses it exactly, for opening the file again. The escape is done on the
whole relative path (``/`` is always ASCII), and is idempotent on names that need none.
"""

from __future__ import annotations

import os
import re

__all__ = ["fs_name", "shown", "source_text"]

_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPE = re.compile(r"\\(\\|x[0-9a-fA-F]{2})")


def _is_byte(ch: str) -> bool:
    """True for the lone surrogates ``surrogateescape`` makes of an undecodable byte."""
    return "\udc80" <= ch <= "\udcff"


def source_text(name: str) -> str:
    """Return ``name`` (as ``os.listdir`` gives it) as valid Unicode text that round-trips.

    Names that are valid UTF-8 and hold no backslash come back unchanged.
    """
    if "\\" not in name:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            return name
    out: list[str] = []
    n = len(name)
    for i, ch in enumerate(name):
        if _is_byte(ch):
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif "\ud800" <= ch <= "\udfff":
            # never from a listing (only U+DC80-U+DCFF are): take the bytes Python would write
            out.append("".join(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass")))
        elif ch == "\\" and i + 1 < n and _starts_escape(name, i + 1):
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out)


def _starts_escape(name: str, i: int) -> bool:
    nxt = name[i]
    if nxt == "\\" or _is_byte(nxt) or "\ud800" <= nxt <= "\udfff":
        return True
    return nxt == "x" and i + 2 < len(name) and name[i + 1] in _HEX and name[i + 2] in _HEX


def fs_name(source: str) -> str:
    """Return the name :func:`source_text` was given: the text ``os`` functions take.

    A source without backslashes is returned as it is (no work for almost every name).
    """
    if "\\" not in source:
        return source
    data = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(source):
        data += source[pos : match.start()].encode("utf-8", "surrogateescape")
        body = match.group(1)
        data += b"\\" if body == "\\" else bytes([int(body[1:], 16)])
        pos = match.end()
    data += source[pos:].encode("utf-8", "surrogateescape")
    return os.fsdecode(bytes(data))


#: What a terminal acts on instead of showing: C0 and C1 controls, DEL, and the bidirectional
#: formatting characters that reorder what follows them ("Trojan source").
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSHOWN_IN_TEXT = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(m: re.Match[str]) -> str:
    ch = m.group()
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def shown(text: str, *, lines: bool = False) -> str:
    """Return ``text`` as a terminal may print it: every control character (and bidirectional
    override) written as an escape (``\\n``, ``\\x1b``, ``\\u202e``) instead of acted on.

    A file's name or text comes from the share: a name with a newline forged a line of
    ``adrap changes``, and an escape sequence in a document's text (a window title, a clipboard
    write, a hyperlink) reached the terminal of whoever ran ``adrap query``. ``lines``: text,
    whose newlines and tabs are kept."""
    pattern = _UNSHOWN_IN_TEXT if lines else _UNSHOWN
    return pattern.sub(_escaped, text) if pattern.search(text) else text
