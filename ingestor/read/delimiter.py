"""A CSV file's delimiter, guessed as ``csv.Sniffer().sniff(sample, delimiters).delimiter`` does,
in linear time.

The standard library's sniffer searches the sample with patterns that backtrack: ``.*?`` from
every delimiter-and-quote pair, and a double-quote check whose four nested repeats are quartic in
a line's length (a 400-byte line took 149 s; its 8 KiB sample would take years). Only the
delimiter is used here, so the double-quote check is left out, and the first stage's four
patterns are matched by hand: each match's closing quote is looked up in an index of where each
quote is followed by what, built in one pass. The second stage (the frequency of each character
per line) is the standard library's, unchanged: it is linear already.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

__all__ = ["sniff_delimiter"]

_QUOTES = "\"'"
_PREFERRED = [",", "\t", ";", " ", ":"]  # csv.Sniffer.preferred


def sniff_delimiter(sample: str, delimiters: str) -> str | None:
    """Return the delimiter ``csv.Sniffer().sniff(sample, delimiters)`` would choose, or None
    where it raises ``csv.Error`` (no delimiter could be determined)."""
    delimiter = _quoted_delimiter(sample, delimiters)
    if not delimiter:
        delimiter = _frequent_delimiter(sample, delimiters)
    return delimiter or None


def _is_delim(c: str) -> bool:
    """``[^\\w\\n"']``: the characters the sniffer's patterns accept as a delimiter."""
    return not (c.isalnum() or c == "_" or c in "\n\"'")


class _Closings:
    """Where each quote is followed by what, to find a quoted field's end without rescanning."""

    def __init__(self, text: str) -> None:
        n = len(text)
        self.pair: dict[tuple[str, str], list[int]] = {}  # (quote, next char) -> positions
        self.delim: dict[str, list[int]] = {q: [] for q in _QUOTES}  # quote then a delimiter
        self.eol: dict[str, list[int]] = {q: [] for q in _QUOTES}  # quote then \n or the end
        for i, c in enumerate(text):
            if c not in _QUOTES:
                continue
            nxt = text[i + 1] if i + 1 < n else ""
            if nxt:
                self.pair.setdefault((c, nxt), []).append(i)
                if _is_delim(nxt):
                    self.delim[c].append(i)
            if nxt in ("", "\n"):
                self.eol[c].append(i)

    @staticmethod
    def first(positions: list[int], at: int) -> int | None:
        k = bisect_left(positions, at)
        return positions[k] if k < len(positions) else None


def _quoted_delimiter(text: str, delimiters: str) -> str:
    """``csv.Sniffer._guess_quote_and_delimiter``'s delimiter: its four patterns in turn, the
    first that matches anywhere decides; the delimiter most often found around quoted fields."""
    closings = _Closings(text)
    for find in (_after_delim_to_delim, _line_start_to_delim, _after_delim_to_eol):
        found = _findall(text, find, closings)
        if found:
            counts: dict[str, int] = {}
            for delim in found:
                if delim and delim in delimiters:
                    counts[delim] = counts.get(delim, 0) + 1
            return max(counts, key=counts.__getitem__) if counts else ""
    # The fourth pattern (a quoted field alone on its line) yields no delimiter either way.
    return ""


_Match = tuple[int, str] | None  # (end of the match, the delimiter it names)


def _findall(
    text: str, match_at: Callable[[str, int, _Closings], _Match], closings: _Closings
) -> list[str]:
    """The delimiters of non-overlapping matches, left to right, as ``re.findall`` scans."""
    found: list[str] = []
    p, n = 0, len(text)
    while p < n:
        m = match_at(text, p, closings)
        if m is None:
            p += 1
        else:
            p, delim = m
            found.append(delim)
    return found


def _opening_after_delim(text: str, p: int) -> int | None:
    """``(?P<delim>[^\\w\\n"'])(?P<space> ?)(?P<quote>["'])``: the quote's offset."""
    n = len(text)
    if not _is_delim(text[p]):
        return None
    o = p + 2 if p + 2 < n and text[p + 1] == " " else p + 1
    return o if o < n and text[o] in _QUOTES else None


def _opening_at_line_start(text: str, p: int) -> int | None:
    """``(?:^|\\n)(?P<quote>["'])`` (multiline): the quote's offset."""
    if text[p] in _QUOTES and (p == 0 or text[p - 1] == "\n"):
        return p
    if text[p] == "\n" and p + 1 < len(text) and text[p + 1] in _QUOTES:
        return p + 1
    return None


def _after_delim_to_delim(text: str, p: int, closings: _Closings) -> _Match:
    """``(?P<delim>[^\\w\\n"'])(?P<space> ?)(?P<quote>["']).*?(?P=quote)(?P=delim)``."""
    o = _opening_after_delim(text, p)
    if o is None:
        return None
    r = closings.first(closings.pair.get((text[o], text[p]), []), o + 1)
    return None if r is None else (r + 2, text[p])


def _line_start_to_delim(text: str, p: int, closings: _Closings) -> _Match:
    """``(?:^|\\n)(?P<quote>["']).*?(?P=quote)(?P<delim>[^\\w\\n"'])(?P<space> ?)``."""
    o = _opening_at_line_start(text, p)
    if o is None:
        return None
    r = closings.first(closings.delim[text[o]], o + 1)
    if r is None:
        return None
    end = r + 2
    if end < len(text) and text[end] == " ":
        end += 1
    return end, text[r + 1]


def _after_delim_to_eol(text: str, p: int, closings: _Closings) -> _Match:
    """``(?P<delim>[^\\w\\n"'])(?P<space> ?)(?P<quote>["']).*?(?P=quote)(?:$|\\n)``."""
    o = _opening_after_delim(text, p)
    if o is None:
        return None
    r = closings.first(closings.eol[text[o]], o + 1)
    return None if r is None else (r + 1, text[p])


def _frequent_delimiter(sample: str, delimiters: str) -> str:
    """``csv.Sniffer._guess_delimiter``: the character whose count per line is the most
    consistent, over growing chunks of ten lines (its logic, unchanged)."""
    data = [line for line in sample.split("\n") if line]
    ascii_chars = [chr(c) for c in range(127)]
    chunk = min(10, len(data))
    iteration = 0
    frequencies: dict[str, dict[int, int]] = {}
    modes: dict[str, tuple[int, int]] = {}
    delims: dict[str, tuple[int, int]] = {}
    start, end = 0, chunk
    while start < len(data):
        iteration += 1
        for line in data[start:end]:
            for char in ascii_chars:
                meta = frequencies.setdefault(char, {})
                freq = line.count(char)
                meta[freq] = meta.get(freq, 0) + 1
        for char, meta in frequencies.items():
            items = list(meta.items())
            if len(items) == 1 and items[0][0] == 0:
                continue
            if len(items) > 1:
                mode = max(items, key=lambda x: x[1])
                items.remove(mode)
                modes[char] = (mode[0], mode[1] - sum(item[1] for item in items))
            else:
                modes[char] = items[0]
        total = float(min(chunk * iteration, len(data)))
        consistency = 1.0
        while not delims and consistency >= 0.9:
            for k, v in modes.items():
                if v[0] > 0 and v[1] > 0 and v[1] / total >= consistency and k in delimiters:
                    delims[k] = v
            consistency -= 0.01
        if len(delims) == 1:
            return next(iter(delims))
        start = end
        end += chunk
    if not delims:
        return ""
    for d in _PREFERRED:
        if d in delims:
            return d
    return max((v, k) for k, v in delims.items())[1]
