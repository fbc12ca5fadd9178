"""Where a piece of context came from: files and character spans, found through the tree.

A leaf is a slice of its document's normalised text (``char_start``/``char_end``), so a sentence of
a leaf has an exact span. A sentence of a summary is located by walking down the children whose
text contains it (extractive summaries are made of their children's sentences) to a leaf; a
sentence no child contains (an LLM's own words) is attributed to the summary's files as a whole
(``char_start`` None), which is all an abstractive summary can honestly claim.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ingestor.summarize.query_focused import split_units
from retriever import NodePayload, NodeStore

__all__ = ["ContextPart", "Span", "SpanResolver", "merge_spans", "spans_for_nodes", "squash"]

_WHITESPACE = re.compile(r"\s+")
#: Deepest walk from a summary to a leaf (trees have at most a handful of layers).
_MAX_DEPTH = 12


def squash(text: str) -> str:
    """Return text with every whitespace run collapsed to one space, stripped."""
    return _WHITESPACE.sub(" ", text).strip()


@dataclass(frozen=True, slots=True, order=True)
class Span:
    """A place in a source file's normalised text; no offsets = the whole file.

    Attributes:
        source: path relative to the watched root.
        char_start: offset of the first character, or None when only the file is known.
        char_end: offset one past the last character, or None.
    """

    source: str
    char_start: int | None = None
    char_end: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "char_start": self.char_start, "char_end": self.char_end}

    def __str__(self) -> str:
        if self.char_start is None:
            return self.source
        return f"{self.source}:{self.char_start}-{self.char_end}"


@dataclass(frozen=True, slots=True)
class ContextPart:
    """One part of a context and where it came from.

    Attributes:
        text: the part as it appears in the context.
        node_ids: the retrieved nodes it was taken or summarised from.
        spans: the files and character spans it came from.
    """

    text: str
    node_ids: tuple[str, ...]
    spans: tuple[Span, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "node_ids": list(self.node_ids),
            "spans": [s.to_json() for s in self.spans],
        }


def merge_spans(spans: Iterable[Span]) -> tuple[Span, ...]:
    """Sort spans and merge overlapping or touching ones of the same file; whole files absorb."""
    out: list[Span] = []
    whole = set()
    for s in sorted(set(spans), key=lambda s: (s.source, s.char_start or -1, s.char_end or -1)):
        if s.char_start is None:
            whole.add(s.source)
            out.append(s)
            continue
        if s.source in whole:
            continue
        last = out[-1] if out else None
        if (
            last is not None
            and last.source == s.source
            and last.char_end is not None
            and s.char_start <= last.char_end + 1
        ):
            out[-1] = Span(s.source, last.char_start, max(last.char_end, s.char_end or 0))
        else:
            out.append(s)
    return tuple(out)


class SpanResolver:
    """Finds the spans of texts inside nodes, reading children from the store (cached per query)."""

    def __init__(
        self, store: NodeStore, lock: contextlib.AbstractContextManager[Any] | None = None
    ) -> None:
        self.store = store
        self.lock: contextlib.AbstractContextManager[Any] = lock or contextlib.nullcontext()
        self._children: dict[str, list[NodePayload]] = {}

    def children(self, node: NodePayload) -> list[NodePayload]:
        if node.node_id not in self._children:
            with self.lock:
                self._children[node.node_id] = self.store.retrieve(list(node.children))
        return self._children[node.node_id]

    def locate(self, node: NodePayload, text: str, start: int | None = None) -> list[Span]:
        """Return the span(s) of ``text``, a piece of ``node.text``.

        Args:
            node: the node the text was taken from.
            text: the piece (a sentence, or a run of sentences).
            start: its offset in ``node.text`` when known (leaves: exact span without a search).
        """
        return self._locate(node, text, start, 0)

    def spans_of(self, node: NodePayload) -> list[Span]:
        """Return the spans of a whole node: a leaf's chunk, or each located sentence of a summary."""
        if node.layer == 0:
            return [_leaf_span(node, 0, len(node.text))]
        spans: list[Span] = []
        for unit in split_units([node.text]):
            spans.extend(self._locate(node, unit.text, None, 0))
        return list(merge_spans(spans))

    def _locate(self, node: NodePayload, text: str, start: int | None, depth: int) -> list[Span]:
        if node.layer == 0:
            if start is not None and node.text[start : start + len(text)] == text:
                return [_leaf_span(node, start, start + len(text))]
            match = _pattern(text).search(node.text)
            if match is None:
                return [_leaf_span(node, 0, len(node.text))]
            return [_leaf_span(node, match.start(), match.end())]
        key = squash(text)
        if depth < _MAX_DEPTH and key:
            for child in self.children(node):
                if key in squash(child.text):
                    return self._locate(child, text, None, depth + 1)
        return [Span(s) for s in node.sources]


def _pattern(text: str) -> re.Pattern[str]:
    """A regex matching ``text`` with any whitespace run where it has one."""
    words = [re.escape(w) for w in text.split()]
    return re.compile(r"\s+".join(words))


def _leaf_span(node: NodePayload, start: int, end: int) -> Span:
    base = node.char_start or 0
    if node.source is None:  # a leaf always has a source; be explicit if one does not
        raise ValueError(f"leaf {node.node_id!r} has no source; re-index with `adrap rebuild`")
    return Span(node.source, base + start, base + end)


def spans_for_nodes(resolver: SpanResolver, nodes: Sequence[NodePayload]) -> tuple[Span, ...]:
    """Return the merged spans of whole nodes."""
    return merge_spans(s for n in nodes for s in resolver.spans_of(n))
