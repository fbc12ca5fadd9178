"""Where a chunk is in its document: its section path and its locator.

A document's text is its parts joined (:mod:`ingestor.read.parts`); each part that has a locator
("page 3", "slide 2", "Budget!A5:D5", "row 12", "attachment a.pdf") starts a *region* at its
offset in the normalised text. A chunk's locator names the regions it covers ("pages 3-4",
"Budget!A5:D9"); its section path is the Markdown headings above its first character
("Budget > Q3").
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence

from ingestor.read.parts import Part
from ingestor.read.sentences import HEADING

__all__ = ["Outline", "join_normalised", "merge_locators"]

SECTION_SEP = " > "


def join_normalised(
    parts: Iterable[Part], normalise: Callable[[str], str]
) -> tuple[str, tuple[tuple[int, str], ...]]:
    """Join parts, each normalised, and return the text and its regions ``(offset, locator)``.

    Each part is normalised on its own and the pieces are joined by a blank line (one newline
    before a part that ``continues``), so the result is itself normalised and a region's offset is
    exact. Empty parts are dropped; consecutive parts with the same locator share one region.
    """
    pieces: list[str] = []
    regions: list[tuple[int, str]] = []
    length = 0
    for part in parts:
        text = normalise(part.text)
        if not text:
            continue
        if pieces:
            sep = "\n" if part.continues else "\n\n"
            pieces.append(sep)
            length += len(sep)
        if part.locator and (not regions or regions[-1][1] != part.locator):
            regions.append((length, part.locator))
        pieces.append(text)
        length += len(text)
    return "".join(pieces), tuple(regions)


class Outline:
    """A document's headings and regions, to place chunks in it.

    Args:
        text: the document's normalised text.
        regions: ``(offset, locator)`` in increasing offset.
    """

    def __init__(self, text: str, regions: Sequence[tuple[int, str]] = ()) -> None:
        matches = list(HEADING.finditer(text))
        self.headings = [(m.start(), len(m.group(1)), m.group(2)) for m in matches]
        self._heading_starts = [h[0] for h in self.headings]
        self._text = text
        self.regions = list(regions)
        self._region_starts = [r[0] for r in self.regions]

    def section(self, start: int, end: int | None = None) -> str | None:
        """The headings above ``start`` (one at ``start`` included), outermost first.

        With ``end``: the headings above the first text of ``text[start:end]`` that is not a
        heading (a chunk that opens with a heading and its subheading is in the subsection).
        """
        if end is not None:
            pos = start
            for line in self._text[start:end].splitlines(keepends=True):
                if line.strip() and not HEADING.match(line.strip()):
                    start = pos
                    break
                pos += len(line)
        path: list[tuple[int, str]] = []
        for _, level, title in self.headings[: bisect_right(self._heading_starts, start)]:
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
        return SECTION_SEP.join(t for _, t in path) or None

    def locator(self, start: int, end: int) -> str | None:
        """The locator of ``text[start:end]``: its first and last regions, merged."""
        first = bisect_right(self._region_starts, start) - 1
        last = bisect_right(self._region_starts, max(start, end - 1)) - 1
        if last < 0:
            return None
        names = [self.regions[i][1] for i in range(max(first, 0), last + 1)]
        return merge_locators(names[0], names[-1]) if names else None


_NUMBERED = re.compile(r"^(?P<word>[a-z]+) (?P<n>\d+)$")
_CELLS = re.compile(r"^(?P<sheet>.+!)(?P<a>[A-Z]+\d+)(?::(?P<b>[A-Z]+\d+))?$")
_CELL = re.compile(r"^([A-Z]+)(\d+)$")


def merge_locators(first: str, last: str) -> str:
    """Name the span from region ``first`` to region ``last``.

    ``page 3`` + ``page 4`` -> ``pages 3-4``; ``Budget!A5:D5`` + ``Budget!A9:C9`` ->
    ``Budget!A5:D9``; anything else -> ``first \\u2013 last``; equal -> itself.
    """
    if first == last:
        return first
    a, b = _NUMBERED.match(first), _NUMBERED.match(last)
    if a and b and a["word"] == b["word"]:
        return f"{a['word']}s {a['n']}-{b['n']}"
    c, d = _CELLS.match(first), _CELLS.match(last)
    if c and d and c["sheet"] == d["sheet"]:
        cells = [_CELL.match(x) for x in (c["a"], c["b"] or c["a"], d["a"], d["b"] or d["a"])]
        if all(cells):
            # rows compared as text, shorter first, as columns are: int() refuses 4,300 digits
            cols = sorted((m[1] for m in cells if m), key=lambda s: (len(s), s))
            rows = sorted((m[2].lstrip("0") or "0" for m in cells if m), key=lambda s: (len(s), s))
            return f"{c['sheet']}{cols[0]}{rows[0]}:{cols[-1]}{rows[-1]}"
    return f"{first} \u2013 {last}"
