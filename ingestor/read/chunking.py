"""Split normalised text into sentence-aligned chunks of at most ``max_tokens`` tokens [A §3.3].

Units (sentences, headings, table rows) come from :mod:`ingestor.read.sentences`. Whole units are
packed into chunks; consecutive chunks share the trailing whole sentences of the previous chunk
(at most ``overlap`` tokens). A sentence longer than a chunk is split at punctuation, then by
tokens at a character boundary. Unlike the paper, whose chunks reach 250 + 50 tokens, the overlap
counts towards ``max_tokens``, so every chunk fits the embedding model's window.

Every chunk is an exact slice of the input (``text[c.char_start:c.char_end] == c.text``), so a
citation can point back into the document.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from ingestor.read.sentences import soft_breaks, split_units
from ingestor.read.tokens import Tokenizer, default_tokenizer

__all__ = ["Chunk", "chunk_text"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chunk:
    """A slice of a document: ``text == document_text[char_start:char_end]``.

    Attributes:
        index: position of the chunk in the document, from 0.
        text: the chunk's text (never starts or ends with whitespace).
        char_start: offset of the first character in the document text.
        char_end: offset one past the last character.
        n_tokens: ``len(tokenizer.encode(text))``, at most the ``max_tokens`` it was made with.
    """

    index: int
    text: str
    char_start: int
    char_end: int
    n_tokens: int


# Chunking ----------------------------------------------------------------------------------------

_Span = Callable[[int, int], int]  # (first unit, last unit) -> tokens
# Real text averages ~4 characters per cl100k token. A span longer than this many characters per
# allowed token is cut without encoding it whole: BPE time grows faster than linearly on long runs
# (a megabyte of spaces), and such a span almost never fits. Cutting it is always valid, only
# perhaps not the tightest packing.
_CHARS_PER_TOKEN_BOUND = 16
_NON_SPACE = re.compile(r"\S")


def chunk_text(
    text: str, *, max_tokens: int = 250, overlap: int = 50, tokenizer: Tokenizer | None = None
) -> list[Chunk]:
    """Pack whole sentences of ``text`` into chunks of at most ``max_tokens`` tokens.

    Consecutive chunks overlap by the largest run of whole trailing units (sentences, or pieces
    of an over-long sentence) of the previous chunk that has at most ``overlap`` tokens; if none
    fits, they do not overlap. Token counts are verified on each chunk's final text, because BPE
    counts are not additive when texts are joined.

    Args:
        text: normalised document text.
        max_tokens: upper bound on ``len(tokenizer.encode(chunk.text))`` for every chunk.
        overlap: upper bound on the tokens shared by two consecutive chunks.
        tokenizer: defaults to cl100k_base (``default_tokenizer()``).

    Returns:
        Chunks in document order with strictly increasing ``char_start``; ``[]`` for blank text.

    Raises:
        ValueError: ``max_tokens < 1``, ``overlap`` outside ``[0, max_tokens)``, or a single
            character needs more than ``max_tokens`` tokens (only possible below 4).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if not 0 <= overlap < max_tokens:
        raise ValueError(
            f"overlap must be in [0, max_tokens={max_tokens}), got {overlap}; lower the overlap"
        )
    tok = tokenizer if tokenizer is not None else default_tokenizer()
    units, headings = _units(text, max_tokens, tok)
    if not units:
        return []
    return _pack(text, units, max_tokens, overlap, tok, headings)


def _units(
    text: str, max_tokens: int, tok: Tokenizer
) -> tuple[list[tuple[int, int, int]], set[int]]:
    """Return ``(start, end, n_tokens)`` spans, each fitting ``max_tokens`` on its own, and the
    indices of the units that are headings."""
    units: list[tuple[int, int, int]] = []
    headings: set[int] = set()
    long_chars = max_tokens * _CHARS_PER_TOKEN_BOUND
    for start, end, kind in split_units(text):
        if kind == "heading":
            headings.add(len(units))
        n = len(tok.encode(text[start:end])) if end - start <= long_chars else max_tokens + 1
        if n <= max_tokens:
            units.append((start, end, n))
        else:
            units.extend(_split_long(text, start, end, max_tokens, tok))
    return units, headings


def _split_long(
    text: str, start: int, end: int, max_tokens: int, tok: Tokenizer
) -> list[tuple[int, int, int]]:
    """Split an over-long sentence at punctuation; hard-split pieces that still do not fit."""
    out: list[tuple[int, int, int]] = []
    long_chars = max_tokens * _CHARS_PER_TOKEN_BOUND
    cuts = soft_breaks(text, start, end)
    piece_start = start
    for cut in [*cuts, end]:
        s, e = _strip(text, piece_start, cut)
        piece_start = cut
        if s >= e:
            continue
        n = len(tok.encode(text[s:e])) if e - s <= long_chars else max_tokens + 1
        if n <= max_tokens:
            out.append((s, e, n))
        else:
            out.extend(_hard_split(text, s, e, max_tokens, tok))
    return out


def _hard_split(
    text: str, start: int, end: int, max_tokens: int, tok: Tokenizer
) -> list[tuple[int, int, int]]:
    """Cut ``text[start:end]`` after ``max_tokens`` tokens, moved back to a character boundary.

    Only a window a little longer than one piece is encoded at a time, so a megabyte without
    punctuation costs linear time. A cut prefers the last whitespace in the second half of a piece.
    """
    out: list[tuple[int, int, int]] = []
    pos = start
    window = max_tokens * 8
    while pos < end:
        stop = min(end, pos + window)
        tokens = tok.encode(text[pos:stop])
        if len(tokens) <= max_tokens:
            if stop == end:
                out.append((pos, end, len(tokens)))
                break
            window *= 2  # very long tokens (runs of symbols): look further
            continue
        limit = max_tokens
        while True:
            cut = _cut_at(text, pos, stop, tok.decode_bytes(tokens[:limit]))
            if cut == pos:
                raise ValueError(
                    f"the character {text[pos]!r} needs more than max_tokens={max_tokens} tokens; "
                    "raise max_tokens"
                )
            seg_start, seg_end = _strip(text, pos, cut)
            n = len(tok.encode(text[seg_start:seg_end]))
            if n <= max_tokens:
                break
            limit -= 1  # BPE re-merged differently at the new end: take one token less
        out.append((seg_start, seg_end, n))
        pos = _skip_space(text, cut)
    return out


def _cut_at(text: str, pos: int, stop: int, prefix: bytes) -> int:
    """Return the character offset of a cut after ``prefix`` (bytes of a token prefix)."""
    raw = text[pos:stop].encode("utf-8")
    nbytes = len(prefix)
    # step back over UTF-8 continuation bytes: never end a piece inside a character
    while 0 < nbytes < len(raw) and raw[nbytes] & 0xC0 == 0x80:
        nbytes -= 1
    cut = pos + len(raw[:nbytes].decode("utf-8"))
    space = text.rfind(" ", pos + (cut - pos) // 2, cut)
    if space > pos:
        cut = space
    return cut


def _skip_space(text: str, pos: int) -> int:
    m = _NON_SPACE.search(text, pos)
    return len(text) if m is None else m.start()


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _pack(
    text: str,
    units: list[tuple[int, int, int]],
    max_tokens: int,
    overlap: int,
    tok: Tokenizer,
    headings: set[int] | None = None,
) -> list[Chunk]:
    """Pack units into chunks. A chunk crosses a heading only to take that heading's whole
    section, and no overlap is carried across a heading (a section starts its chunk clean)."""
    headings = headings or set()
    n_units = len(units)
    section_end = list(range(n_units))  # the last unit of the section a heading opens
    last = n_units - 1
    for k in range(n_units - 1, -1, -1):
        section_end[k] = last
        if k in headings:
            last = k - 1
    # Estimated tokens of units i..j = unit tokens plus the separators between them; a plain space
    # merges into the next word's token, other whitespace (newlines) costs its own tokens.
    gaps = [0] + [
        _gap_tokens(text, units[k - 1][1], units[k][0], max_tokens, tok) for k in range(1, n_units)
    ]
    cum_units = [0, *accumulate(u[2] for u in units)]
    cum_gaps = [0, *accumulate(gaps)]

    def estimate(i: int, j: int) -> int:
        return cum_units[j + 1] - cum_units[i] + cum_gaps[j + 1] - cum_gaps[i + 1]

    def exact(i: int, j: int) -> int:
        return len(tok.encode(text[units[i][0] : units[j][1]]))

    chunks: list[Chunk] = []
    first = 0  # first unit of the chunk being built (overlap included)
    fresh = 0  # first unit not yet in any chunk
    while fresh < n_units:
        i, j = first, fresh
        while i < fresh and estimate(i, j) > max_tokens:
            i += 1  # the overlap gives way to the new unit
        while j + 1 < n_units and estimate(i, j + 1) <= max_tokens:
            if j + 1 in headings and estimate(i, section_end[j + 1]) > max_tokens:
                break  # the next section does not fit whole: it starts a chunk of its own
            j += 1
        checked = first  # _overlap_start verified the overlap that starts at `first`
        while True:
            n_tokens = exact(i, j)
            if n_tokens > max_tokens:
                if j > fresh:
                    j -= 1
                else:
                    i += 1  # ends at the latest when i == j == fresh: that unit fits alone
                continue
            if i < fresh and i != checked:
                # a shorter overlap starts at another word, which BPE may split differently
                if exact(i, fresh - 1) > overlap:
                    i += 1
                    continue
                checked = i
            break
        start, end = units[i][0], units[j][1]
        chunks.append(Chunk(len(chunks), text[start:end], start, end, n_tokens))
        fresh = j + 1
        clean = fresh >= n_units or fresh in headings
        first = fresh if clean else _overlap_start(i, j, overlap, estimate, exact)
        inside = [k for k in range(first + 1, fresh) if k in headings]
        if inside:  # the overlap would carry a heading's end into the next: start at it
            first = inside[-1]
    return chunks


def _gap_tokens(text: str, start: int, end: int, max_tokens: int, tok: Tokenizer) -> int:
    if end - start <= 1 and text[start:end] in ("", " "):
        return 0
    if end - start > max_tokens * _CHARS_PER_TOKEN_BOUND:
        return max_tokens + 1  # never encoded: a chunk boundary goes here
    return len(tok.encode(text[start:end]))


def _overlap_start(i: int, j: int, overlap: int, estimate: _Span, exact: _Span) -> int:
    """Return the first unit of the longest whole-unit suffix of ``i..j`` within ``overlap``.

    The suffix never starts at ``i``, so chunk starts strictly increase. ``j + 1`` means none.
    """
    if overlap == 0:
        return j + 1
    k = j + 1
    while k - 1 > i and estimate(k - 1, j) <= overlap:
        k -= 1
    while k <= j and exact(k, j) > overlap:
        k += 1
    return k
