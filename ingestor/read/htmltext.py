"""Visible text of an HTML document, one paragraph per block element (stdlib parser only)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["defuse_html", "html_to_text"]

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
# Spaces, a newline, spaces. A match starts at the first space of a run (or at the newline): one
# starting inside a run of spaces that no newline ends would rescan it (quadratic).
_SPACES_AROUND_NEWLINE = re.compile(r"(?<! ) ++\n *+|\n *+")


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


def html_to_text(html: str) -> str:
    """Return the visible text of an HTML document, one paragraph per block element.

    Contents of ``script``, ``style``, ``head`` (with ``title``), ``noscript`` and ``template`` are
    dropped, entities are unescaped, whitespace collapses as a browser would except inside
    ``<pre>``. ``<br>`` ends a line (two of them end a paragraph). Linear in the length of the
    document (see :func:`defuse_html`).
    """
    parser = _TextExtractor()
    parser.feed(defuse_html(html))
    parser.close()
    return "\n\n".join(parser.blocks)


# Python's HTMLParser (before 3.11.13, CVE-2025-6069) rescans the rest of the document from every
# markup opener that nothing closes, then reads it as text: "<a" repeated 40,000 times took 13 s
# (1 MB: an hour). And "<![" with an unknown keyword raised AssertionError out of the reader.
_MARKUP = re.compile(r"<(?:(?P<comment>!--)|!\[(?P<section>[a-zA-Z][-_.a-zA-Z0-9]*+\s*+)?)?")
_COMMENT_CLOSE = re.compile(r"--\s*+>")
_SECTION_CLOSE = re.compile(r"\]\s*+\]\s*+>")
_MS_SECTION_CLOSE = re.compile(r"\]\s*+>")
_SECTIONS = frozenset({"temp", "cdata", "ignore", "include", "rcdata"})
_MS_SECTIONS = frozenset({"if", "else", "endif"})
# Every "<" but that of "</script" or "</style": an opener inside a script is its text, and
# escaping the end tag would hide the rest of the page in the script.
_RAW_TEXT_END = re.compile(r"<(?!/(?i:script|style))")


def defuse_html(html: str) -> str:
    """Return ``html`` with the ``<`` of every opener that nothing closes written ``&lt;``.

    The parser reads such an opener, up to the next ``>``, as text after a rescan to the end:
    ``&lt;`` reads as the same text at once. The openers are every ``<`` after the last ``>``, a
    ``<!--`` after the last ``-->``, and a ``<![`` marked section after the last ``]]>`` (``]>``
    for ``<![if``). A ``<![`` of unknown kind becomes a bogus comment (``<!-[``), as HTML5 reads
    it: the parser raised AssertionError on it.
    """
    last_gt = html.rfind(">")
    last = {
        "comment": _last_start(_COMMENT_CLOSE, html),
        "section": _last_start(_SECTION_CLOSE, html),
        "ms": _last_start(_MS_SECTION_CLOSE, html),
    }
    pieces: list[str] = []
    done = 0  # html[:done] is in pieces
    for m in _MARKUP.finditer(html):
        i = m.start()
        if i < done:
            continue  # already written as text
        if i > last_gt:
            pieces += [html[done:i], html[i:].replace("<", "&lt;")]
            done = len(html)
            break
        if m.group("comment") is not None:
            closable = last["comment"] >= i + 4
        elif html.startswith("<![", i):
            name = (m.group("section") or "").strip().lower()
            if name in _SECTIONS:
                closable = last["section"] >= i + 3
            elif name in _MS_SECTIONS:
                closable = last["ms"] >= i + 3
            else:
                pieces += [html[done:i], "<!-["]
                done = i + 3
                continue
        else:
            continue
        if not closable:  # read as text up to the next ">": written so, in one go
            end = html.find(">", i + 1) + 1
            pieces += [html[done:i], _RAW_TEXT_END.sub("&lt;", html[i:end])]
            done = end
    pieces.append(html[done:])
    return "".join(pieces)


def _last_start(pattern: re.Pattern[str], text: str) -> int:
    start = -1
    for m in pattern.finditer(text):
        start = m.start()
    return start
