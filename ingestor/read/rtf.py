"""Rich Text Format (.rtf): its text through striprtf (BSD-3-Clause), paragraphs kept."""

from __future__ import annotations

import logging
import re

from ingestor.errors import SourceError
from ingestor.read.parts import Extracted, Part

__all__ = ["read_rtf"]

log = logging.getLogger(__name__)

_CODEPAGE = re.compile(rb"\\ansicpg(\d+)")
_BLANKS = re.compile(r"\n{3,}")


def read_rtf(data: bytes, name: str) -> Extracted:
    """Return an RTF document's text as one part (its ``\\ansicpg`` code page, else cp1252).

    Raises:
        SourceError: the bytes are not RTF or cannot be parsed.
    """
    if not data.lstrip().startswith(b"{\\rtf"):
        raise SourceError(f"{name!r} is not RTF (it does not start with '{{\\rtf'); rename it")
    from striprtf.striprtf import rtf_to_text

    match = _CODEPAGE.search(data[:4096])
    encoding = f"cp{match.group(1).decode()}" if match else "cp1252"
    try:
        "".encode(encoding)
    except LookupError:
        encoding = "cp1252"
    try:
        # RTF is 7-bit: anything else arrives as \'xx escapes that striprtf decodes itself.
        text: str = rtf_to_text(  # type: ignore[no-untyped-call]  # striprtf has no hints
            data.decode("latin-1"), encoding=encoding, errors="replace"
        )
    except (ValueError, IndexError, KeyError, RecursionError) as exc:
        raise SourceError(
            f"{name!r} is not readable RTF ({type(exc).__name__}); re-save it or remove it"
        ) from exc
    text = _BLANKS.sub("\n\n", text).strip()
    return Extracted((Part(text),) if text else ())
