"""The token-budget fill, one rule for every caller [RAPTOR §3; adRAP App. A].

Hits are taken in the given (score) order while the running total of their ``n_tokens`` stays
within ``max_tokens``; the first node that does not fit stops the fill: no later node is taken,
however small (the papers' reference implementation). A node larger than the whole budget is never
taken, so a budget smaller than the best hit yields nothing. A zero-token node always fits.
The context fill (:func:`context_fill`, every query mode's) also skips a node whose text the
context holds already (a copy of its file); the stores hand it hits of equal score in the order of
their ids (:func:`ties_by_id`), so one question gets one context.

:func:`fill_budget` applies the rule to a list of hits; :class:`Budget` is the rule as one decision
per node, for a fill that reads its nodes as it goes (the stores' ``search_budget``, which fetch
payloads or ``n_tokens`` in batches).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from retriever.schema import NodePayload, ScoredNode

_T = TypeVar("_T")

#: In the default collapsed fill, a summary is taken only among the first this many hits: where
#: it is the question's best match (the gist of a cluster asked for), not beside the leaves that
#: answer. Offline summaries are sentence samples of leaves: lower in the ranking they took 8-15 %
#: of a context and held 0-1 of ~430 evidence turns (LoCoMo), and every set but QuALITY gained
#: from leaving them out there (docs/retrieval.md).
SUMMARY_RANKS: Final = 1
#: In the default collapsed fill, a summary is left out of a context holding this share of its
#: children (0.01 left out nearly every summary and lost the multi-hop gains, 0.5 kept too many
#: at small budgets: docs/retrieval.md).
REDUNDANT_SHARE: Final = 0.3
#: In the default collapsed fill, a summary longer than this share of the budget is left out: in
#: a small context it took the place of a leaf that answers (500 tokens: LoCoMo 0.5-2.1 points
#: under flat search in every category; capped, -0.6 to +0.7; 1000 and 2000 tokens unchanged,
#: the summaries being shorter than a quarter of them: docs/retrieval.md).
SUMMARY_SHARE: Final = 0.25


@dataclass(frozen=True, slots=True)
class FillRule:
    """Which summaries a collapsed-tree fill leaves out; leaves are never left out by it.

    Attributes:
        summary_ranks: a summary is taken only among the first this many hits (None: at any
            rank). A summary past them is left out before the fill, its tokens never counted.
        redundant_share: a summary that would share the context with at least this share of its
            children is left out and the fill runs again (None: never). Needs the hits'
            ``children``.
        summary_share: a summary of more than this share of the budget's tokens is left out
            before the fill (None: any that fits).

    :data:`PAPERS_FILL` (none: the greedy fill of RAPTOR's reference implementation) and
    :data:`DEFAULT_FILL` (all three) are the two in use; each part applies on its own.
    """

    summary_ranks: int | None = None
    redundant_share: float | None = None
    summary_share: float | None = None

    def __post_init__(self) -> None:
        if self.summary_ranks is not None and self.summary_ranks < 0:
            raise ValueError(f"summary_ranks must be >= 0 or None, got {self.summary_ranks}")
        if self.redundant_share is not None and not 0.0 < self.redundant_share <= 1.0:
            raise ValueError(
                f"redundant_share must be in (0, 1] or None, got {self.redundant_share}"
            )
        if self.summary_share is not None and not 0.0 < self.summary_share <= 1.0:
            raise ValueError(f"summary_share must be in (0, 1] or None, got {self.summary_share}")

    @property
    def plain(self) -> bool:
        """Whether no summary is ever left out (the papers' fill)."""
        return (
            self.summary_ranks is None
            and self.redundant_share is None
            and self.summary_share is None
        )

    def too_long(self, n_tokens: int, max_tokens: int) -> bool:
        """Whether a summary of ``n_tokens`` is left out of a ``max_tokens`` context (one that
        would not fit at all is passed over, where the papers' fill would stop at it)."""
        return self.summary_share is not None and n_tokens > self.summary_share * max_tokens


#: The papers' greedy fill: every hit in score order while it fits.
PAPERS_FILL: Final = FillRule()
#: The default collapsed fill: a summary only as the best hit, never beside its own children,
#: never more than a quarter of the budget.
DEFAULT_FILL: Final = FillRule(
    summary_ranks=SUMMARY_RANKS, redundant_share=REDUNDANT_SHARE, summary_share=SUMMARY_SHARE
)


class Budget:
    """The greedy fill's state: ``take(n_tokens)`` says whether the next node in score order is
    taken; once one is refused the fill has stopped and every later ``take`` is refused too.

    Attributes:
        max_tokens: the budget.
        used: tokens of the nodes taken so far.
        stopped: whether a node did not fit (the fill is over).
    """

    __slots__ = ("max_tokens", "stopped", "used")

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.used = 0
        self.stopped = False

    def take(self, n_tokens: int) -> bool:
        """Return whether the next node (``n_tokens`` long) is taken, counting it if so."""
        if self.stopped or self.used + n_tokens > self.max_tokens:
            self.stopped = True
            return False
        self.used += n_tokens
        return True

    @property
    def left(self) -> int:
        """Tokens still free."""
        return self.max_tokens - self.used


def fill(items: Iterable[_T], n_tokens: Callable[[_T], int], max_tokens: int) -> list[_T]:
    """Return the leading ``items`` the :class:`Budget` of ``max_tokens`` takes, each
    ``n_tokens(item)`` long (items in score order)."""
    budget = Budget(max_tokens)
    out: list[_T] = []
    for item in items:
        if not budget.take(n_tokens(item)):
            break
        out.append(item)
    return out


def _hit_tokens(hit: ScoredNode) -> int:
    return hit.node.n_tokens


def fill_budget(hits: Sequence[ScoredNode], max_tokens: int) -> list[ScoredNode]:
    """Take hits in the given order while the running ``n_tokens`` total stays ≤ ``max_tokens``,
    stopping at the first that does not fit (:class:`Budget`)."""
    return fill(hits, _hit_tokens, max_tokens)


def context_fill(
    items: Sequence[_T],
    max_tokens: int,
    rule: FillRule,
    *,
    key: Callable[[_T], str],
    n_tokens: Callable[[_T], int],
    children: Callable[[_T], Sequence[str]],
    text_key: Callable[[_T], str] | None = None,
) -> tuple[list[_T], bool]:
    """Return the collapsed tree's fill of ``items`` (score order) and whether it took every
    item it did not leave out (so that more items might be taken too).

    The :class:`Budget` rule, with the summaries (items with ``children``) ``rule`` leaves out:
    those past its ``summary_ranks`` first items and those longer than its ``summary_share`` of
    ``max_tokens``, then those that would share the context with
    at least its ``redundant_share`` of their children, the fill running again until no kept
    summary has that share of its children in the context (a summary's text is drawn from its
    children: with enough of them there it repeats what the reader already has, and its tokens
    go to the next hit instead). A summary left out is not taken back.

    With ``text_key`` (the hash of a node's text), a node whose text an earlier item (not left
    out) already holds is left out: copies of a file in a share (``report (1).docx``, a folder
    copied to another) have leaves of the same text, which filled a context twice.

    The fill of a prefix of ``items`` that did not take every item of it is the fill of all of
    them (each round stops inside the prefix), so a store may read hits as it goes and stop
    there (``search_budget``).
    """
    ranks = len(items) if rule.summary_ranks is None else rule.summary_ranks
    dropped = {  # summaries only as the best hits, none too long for the budget
        key(i)
        for rank, i in enumerate(items)
        if children(i) and (rank >= ranks or rule.too_long(n_tokens(i), max_tokens))
    }
    share = rule.redundant_share
    while True:
        rest = [i for i in items if key(i) not in dropped]
        if text_key is not None:
            rest = _first_of_each_text(rest, text_key)
        chosen = fill(rest, n_tokens, max_tokens)
        if share is None:
            return chosen, len(chosen) == len(rest)
        ids = {key(i) for i in chosen}
        more = set()
        for i in chosen:
            kids = children(i)
            if kids and sum(c in ids for c in kids) >= share * len(kids):
                more.add(key(i))
        if not more:
            return chosen, len(chosen) == len(rest)
        dropped |= more


class _Hit(Protocol):
    @property
    def score(self) -> float: ...
    @property
    def id(self) -> Any: ...


_H = TypeVar("_H", bound=_Hit)


def ties_by_id(hits: list[_H]) -> list[_H]:
    """``hits`` (best first) with each run of equal scores in the order of the points' ids.

    The engine returns equal scores in no set order, and it can change with the limit asked
    for: copies of a file have the same vectors and BM25 terms, so their leaves tie, and which
    copy a fill takes (and so which summaries it leaves out as repeating their children) changed
    between two queries of one question. Ids are read only for the hits that tie."""
    scores = [h.score for h in hits]
    if len(set(scores)) == len(scores):
        return hits
    out, start = list(hits), 0
    while start < len(out):
        end = start + 1
        while end < len(out) and scores[end] == scores[start]:
            end += 1
        if end - start > 1:
            out[start:end] = sorted(out[start:end], key=lambda h: str(h.id))
        start = end
    return out


def _first_of_each_text(items: list[_T], text_key: Callable[[_T], str]) -> list[_T]:
    """``items`` less those whose text an earlier one holds (an empty hash is no text's)."""
    seen: set[str] = set()
    out: list[_T] = []
    for i in items:
        text = text_key(i)
        if text not in seen:
            out.append(i)
            if text:
                seen.add(text)
    return out


def _hit_key(hit: ScoredNode) -> str:
    return hit.node.node_id


def _hit_children(hit: ScoredNode) -> Sequence[str]:
    return hit.node.children


def _hit_text(hit: ScoredNode) -> str:
    return hit.node.content_hash


def context_hits(
    hits: Sequence[ScoredNode], max_tokens: int, rule: FillRule
) -> tuple[list[ScoredNode], bool]:
    """:func:`context_fill` of scored nodes, a text held twice taken once."""
    return context_fill(
        hits,
        max_tokens,
        rule,
        key=_hit_key,
        n_tokens=_hit_tokens,
        children=_hit_children,
        text_key=_hit_text,
    )


#: First batch of payloads :func:`fill_hits` reads (~2000 tokens of nodes).
BUDGET_BATCH: Final = 16


def fill_hits(
    hits: Sequence[_Hit],
    payloads: Callable[[list[Any]], dict[Any, dict[str, Any]]],
    may_read: Callable[[NodePayload], bool],
    max_tokens: int,
    rule: FillRule,
    fetched: dict[Any, dict[str, Any]],
) -> tuple[list[ScoredNode], bool]:
    """Return the fill of a store's ``hits`` (:func:`context_hits`) and whether it stopped
    inside them (a node did not fit).

    Payloads are read (``payloads`` of hit ids; a missing one: deleted since the query) in
    batches as the fill goes, kept in ``fetched`` for a second fill: 16, then as many as the
    tokens left would take at the smallest node seen, plus one; the fill of the hits read so far
    is final once it stops inside them. A node the caller may not read (``may_read``) is
    passed over."""
    read: list[ScoredNode] = []
    kept: list[ScoredNode] = []
    start, size, smallest = 0, BUDGET_BATCH, max_tokens
    while start < len(hits):
        batch = hits[start : start + size]
        point_ids = [h.id for h in batch]  # read per batch: each read builds a uuid.UUID
        missing = [p for p in point_ids if p not in fetched]
        if missing:
            fetched.update(payloads(missing))
        for point, hit in zip(point_ids, batch, strict=True):
            payload = fetched.get(point)
            if payload is None:
                continue  # deleted since the query: as if the search had run after
            node = NodePayload.from_payload(payload)
            if may_read(node):
                read.append(ScoredNode(node, float(hit.score)))
                smallest = min(smallest, node.n_tokens)
        kept, took_all = context_hits(read, max_tokens, rule)
        if not took_all:
            return kept, True
        start += size
        left = max_tokens - sum(h.node.n_tokens for h in kept)
        size = left // smallest + 1 if smallest > 0 else size * 2
    return kept, False
