"""Visible text of an HTML document, one paragraph per block element (stdlib parser only)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["html_to_text"]

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


def html_to_text(html: str) -> str:
    """Return the visible text of an HTML document, one paragraph per block element.

    Contents of ``script``, ``style``, ``head`` (with ``title``), ``noscript`` and ``template`` are
    dropped, entities are unescaped, whitespace collapses as a browser would except inside
    ``<pre>``. ``<br>`` ends a line (two of them end a paragraph).
    """
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return "\n\n".join(parser.blocks)
