"""Split normalised text into sentences and units (headings, table rows, sentences), offline.

Sentences come from a rule-based splitter (no NLTK data to download): terminal punctuation
followed by whitespace, with abbreviations, initials, enumerators and decimals kept inside a
sentence; a paragraph break always ends one. Spans are ``(start, end)`` offsets into the text, so
the caller slices the exact characters (:mod:`ingestor.read.chunking` packs them into chunks; the
extractive summarisers pick them).
"""

from __future__ import annotations

import re

__all__ = ["BULLET", "HEADING", "soft_breaks", "split_sentences", "split_units"]

# Sentences ---------------------------------------------------------------------------------------

# Escapes, not glyphs: curly quotes and fullwidth marks look like their ASCII twins in review.
_CLOSERS = "\"')]}\u201d\u2019\u00bb\u300d\u300f\u3011\u300b"  # right quotes, », CJK brackets
_OPENERS = "\"'([{\u201c\u2018\u00ab"  # left quotes, «
_CJK_TERMINATORS = "\u3002\uff01\uff1f"  # ideographic full stop, fullwidth ! and ?
_DASHES = "\u2014\u2013"  # em and en dash
# A paragraph break, or terminal punctuation plus any closing quotes/brackets. Every pattern of
# this package runs on untrusted text in linear time: adjacent repeats match disjoint characters,
# and possessive quantifiers (*+ ++) say so to the engine, so a failed match never backtracks
# (tests/unit/read/test_linear.py feeds each one the classic worst cases).
_BOUNDARY = re.compile(
    r"(?P<para>\n[^\S\n]*+\n\s*+)"
    rf"|(?P<term>(?:[.!?\u2026]++|[{_CJK_TERMINATORS}]++)[{re.escape(_CLOSERS)}]*+)"
)
_NON_SPACE = re.compile(r"\S")
_WORD_BEFORE = re.compile(r"\S{1,30}$")
# Titles and Latin abbreviations: a following capital is a name or a new clause, not a sentence.
_NEVER_FINAL = frozenset(
    ["mr", "mrs", "ms", "mx", "dr", "prof", "st", "sr", "jr", "rev", "fr", "gen", "col", "capt",
     "cpt", "lt", "sgt", "maj", "adm", "hon", "gov", "sen", "rep", "pres", "mt", "messrs", "mme",
     "mlle", "mm", "e.g", "i.e", "cf", "vs", "viz", "al", "ca", "approx", "esp", "dept", "univ"]
)  # fmt: skip
# Before a number these are references ("No. 5", "Fig. 3", "Jan. 12"); before a word, sentence ends.
_BEFORE_NUMBER = frozenset(
    ["no", "nos", "vol", "vols", "pp", "p", "fig", "figs", "eq", "eqs", "ch", "sec", "art", "op",
     "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"]
)  # fmt: skip
# These often end a sentence ("... pears, etc. Then"): final only before a capital letter.
_FINAL_BEFORE_CAPITAL = frozenset(["etc", "inc", "ltd", "co", "corp", "bros"])
_ACRONYM = re.compile(r"(?:\w\.)+\w")  # U.S, e.g, a.m, J.R.R


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Split ``text`` into sentences, offline and deterministically.

    Sentences end at ``.``, ``!``, ``?``, ``…`` (plus closing quotes or brackets) followed by
    whitespace, at CJK full stops, and always at a paragraph break (a blank line). A period after an
    abbreviation (``Mr.``, ``e.g.``), an initial (``J. R. R.``) or an enumerator (``1.``) does not
    end a sentence, nor does punctuation followed by a lowercase letter; decimals such as ``3.14``
    never do. Single newlines inside a paragraph are kept inside the sentence.

    Returns:
        ``(start, end)`` character spans in order, each without leading or trailing whitespace;
        together they contain every non-whitespace character of ``text``.
    """
    spans: list[tuple[int, int]] = []
    start = _skip_space(text, 0)
    n = len(text)
    for m in _BOUNDARY.finditer(text, start):
        if m.start() < start:
            continue  # inside whitespace already skipped
        if m.group("para") is not None:
            _add_span(spans, text, start, m.start())
            start = m.end()
            continue
        end = m.end()
        term = m.group("term")
        if term[0] not in _CJK_TERMINATORS and end < n and not text[end].isspace():
            continue  # "3.14", "example.com", "e.g.," : no space, no boundary
        nxt = _skip_space(text, end)
        if nxt >= n or _ends_sentence(text, start, m.start(), term, nxt):
            _add_span(spans, text, start, end)
            start = nxt
    _add_span(spans, text, start, n)
    return spans


def _skip_space(text: str, pos: int) -> int:
    m = _NON_SPACE.search(text, pos)
    return len(text) if m is None else m.start()


def _add_span(spans: list[tuple[int, int]], text: str, start: int, end: int) -> None:
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))


def _ends_sentence(text: str, sent_start: int, punct_start: int, term: str, nxt: int) -> bool:
    following = text[nxt]
    if following.islower():
        return False  # '"Help!" she cried.', 'approx. five'
    if term != ".":
        return True  # "!", "?", "...", CJK marks, or a period inside quotes/brackets
    m = _WORD_BEFORE.search(text, max(sent_start, punct_start - 30), punct_start)
    if m is None:
        return True
    word = m.group().lstrip(_OPENERS)
    lower = word.lower()
    if lower in _NEVER_FINAL:
        return False
    if lower in _BEFORE_NUMBER:
        return not following.isdigit()
    if lower in _FINAL_BEFORE_CAPITAL:
        return following.isupper()
    if len(word) == 1 and word.isupper():
        return False  # an initial: "J. R. R. Tolkien"
    if _ACRONYM.fullmatch(word):
        return False  # "U.S. President", "J.R.R. Tolkien": rather join two sentences than cut one
    # an enumerator opening the sentence: "1. Preheat", "iv. Stir"
    return not (m.start() == sent_start and (word.isdigit() or _is_roman_numeral(lower)))


def _is_roman_numeral(word: str) -> bool:
    return 0 < len(word) <= 4 and set(word) <= set("ivxlc")


# Units -------------------------------------------------------------------------------------------

#: A Markdown heading line (``## Budget``); converters write document headings this way. Group 2
#: is the title without its trailing spaces and closing ``#``s: the lazy ``(\S.*?)[ \t#]*$`` it
#: replaces retried the tail at every character (quadratic on a long line of spaces).
HEADING = re.compile(r"^(#{1,6}+)[ \t]++(\S(?:[ \t#]*+[^ \t#\n])*+)[ \t#]*+$", re.M)
#: A table row: one line from ``|`` to ``|`` (converters write each row as one such line).
_ROW = re.compile(r"^\|.*\|$")
#: A list item's marker: ``- ``, ``* ``, ``1. ``, ``a) `` and bullet glyphs.
BULLET = re.compile(r"^(?:[-*+\u2022\u25aa\u2013]|\d{1,3}[.)]|[a-zA-Z][.)])[ \t]+")


def split_units(text: str) -> list[tuple[int, int, str]]:
    """Split ``text`` into units: heading lines, table rows, and the sentences of the rest.

    A heading or a table row is one unit (kind ``heading`` / ``row``), never split and never
    joined with its neighbours (a row's cells may hold periods); a list item starts a new
    sentence. Other units have kind ``text``. Spans are in order, without surrounding whitespace.
    """
    out: list[tuple[int, int, str]] = []
    run_start: int | None = None  # first character of the ordinary lines being gathered

    def flush(end: int) -> None:
        nonlocal run_start
        if run_start is not None:
            base = run_start
            out.extend((base + a, base + b, "text") for a, b in split_sentences(text[base:end]))
            run_start = None

    pos = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if HEADING.match(stripped) or _ROW.match(stripped):
            flush(pos)
            start = pos + line.index(stripped[0])
            out.append((start, start + len(stripped), "heading" if stripped[0] == "#" else "row"))
        elif BULLET.match(stripped):
            flush(pos)
            run_start = pos
        elif run_start is None and stripped:
            run_start = pos
        pos += len(line)
    flush(pos)
    return out


# Split points inside an over-long sentence: after clause punctuation, around dashes, at newlines.
# The first branch takes a whole run of ``, ; : ) ]`` possessively (with its closers when space
# follows: group ``closed``), so a run that may not be cut is passed over once; the pattern it
# replaces split such a run between two overlapping classes at every start (cubic: 1,500 ``)``
# took 10 s, and the daemon froze).
_SOFT_BREAK = re.compile(
    rf"(?P<clause>[,;:)\]]++)(?P<closed>[{re.escape(_CLOSERS)}]*+(?=\s))?"
    rf"|[{_DASHES}](?=\S)|(?<=\S)\s++(?:--|[{_DASHES}])\s+|\n"
)


def soft_breaks(text: str, start: int = 0, end: int | None = None) -> list[int]:
    """Return the offsets in ``text[start:end]`` after which an over-long sentence may be cut.

    A cut follows clause punctuation (``, ; : ) ]`` and any closing quotes or brackets) that
    whitespace follows, an em or en dash that a word follows, a spaced dash (``a -- b``), or a
    newline. Linear in the length of the text.
    """
    stop = len(text) if end is None else end
    return [
        m.end()
        for m in _SOFT_BREAK.finditer(text, start, stop)
        if m.group("clause") is None or m.group("closed") is not None
    ]
