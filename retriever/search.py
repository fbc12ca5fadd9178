"""RAPTOR retrieval over a node store: collapsed tree (one filtered ANN query) and tree traversal.

Collapsed tree [RAPTOR §3; adRAP App. A]: nearest nodes of every layer to the query, filtered by
``tree`` (and optionally a layer range and a source folder/file), then taken in score order while
the running token total stays within ``max_tokens`` — stopping at the first node that does not fit,
as the papers' reference implementation does (the one rule: :mod:`retriever.budget`). Where
leaves and summaries are both searched, a summary is taken only as the best hit (the gist of a
cluster is what the question matches best) and only if it is at most a quarter of the budget;
lower in the ranking an offline summary, a sample of its leaves' sentences, took budget from the
leaves that answer, and in a small context so did a long one. A summary that would sit in that
context beside enough of its own children is then left out and the fill runs again: its text is
drawn from those children, so it repeated what the context held while taking budget from the
next hits (measured: docs/retrieval.md; the rule: :data:`retriever.budget.DEFAULT_FILL`). The
store does all of it as it reads hits (:func:`retriever.budget.context_fill`), reading about the
budget's worth of payloads.

Tree traversal [RAPTOR §3]: the top-k nodes of the top layer, then the top-k among the children of
those, layer by layer down to the leaves. RAPTOR concatenates every selected node; under a token
budget the selected nodes are taken in score order (as in the collapsed tree), so a budget smaller
than the whole selection keeps the most similar nodes rather than only the upper layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retriever.budget import DEFAULT_FILL, PAPERS_FILL, FillRule, context_hits
from retriever.budget import fill_budget as fill_budget  # the one fill rule, re-exported
from retriever.protocols import NodeStore
from retriever.schema import ScoredNode, SearchFilter

DEFAULT_MAX_TOKENS = 2000
MAX_LAYERS = 8


def candidate_limit(max_tokens: int) -> int:
    """Return how many hits one query fetches so the budget can be filled even by short nodes."""
    return max(50, max_tokens // 20)


def collapsed_tree(
    store: NodeStore,
    query_vector: NDArray[np.float32],
    flt: SearchFilter,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    text: str | None = None,
    rule: FillRule = DEFAULT_FILL,
) -> list[ScoredNode]:
    """Return the collapsed-tree context: one filtered ANN query, then the token-budget fill.

    Given the question's ``text``, the query is hybrid where the store has BM25 vectors (dense
    and sparse prefetch fused, see :mod:`retriever.sparse`). ``rule`` says which summaries the
    fill leaves out, as the store reads hits (:func:`~retriever.budget.context_fill`): by default
    a summary is taken only as the best hit, of at most a quarter of the budget, and never
    beside enough of its own children;
    :data:`~retriever.budget.PAPERS_FILL` is the plain fill of the papers (a filter of leaves
    only, or of summaries only, is always that)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be ≥ 1, got {max_tokens}")
    limit = candidate_limit(max_tokens)
    if flt.leaves_only or flt.summaries_only:  # no summary to leave out, or summaries asked for
        rule = PAPERS_FILL
    return store.search_budget(query_vector, flt, limit, max_tokens, text=text, rule=rule)


def top_layer(store: NodeStore, flt: SearchFilter) -> int | None:
    """Return the highest layer holding a node that matches ``flt``, or None for an empty tree."""
    for layer in range(MAX_LAYERS, -1, -1):
        if store.count(replace(flt, min_layer=layer, max_layer=layer)) > 0:
            return layer
    return None


def tree_traversal(
    store: NodeStore,
    query_vector: NDArray[np.float32],
    flt: SearchFilter,
    *,
    top_k: int = 5,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    text: str | None = None,
) -> list[ScoredNode]:
    """Return the nodes selected by top-k traversal from the top layer down, within the budget.

    Given ``text``, each layer's search is hybrid where the store has BM25 vectors; the nodes
    selected are then ordered by their fused scores (each search's own)."""
    if top_k < 1:
        raise ValueError(f"top_k must be ≥ 1, got {top_k}")
    layer = top_layer(store, flt)
    if layer is None:
        return []
    selected: list[ScoredNode] = []

    def search(f: SearchFilter) -> list[ScoredNode]:
        if text is None:
            return store.search(query_vector, f, top_k)
        return store.search(query_vector, f, top_k, text=text)

    hits = search(replace(flt, min_layer=layer, max_layer=layer))
    while hits:
        selected.extend(hits)
        children = tuple(dict.fromkeys(c for h in hits for c in h.node.children))
        if not children:
            break
        hits = search(replace(flt, ids=children, min_layer=None))
    selected.sort(key=lambda h: -h.score)
    return context_hits(selected, max_tokens, PAPERS_FILL)[0]  # the fill, a text held twice once


def run_query(
    store: NodeStore,
    query_vector: NDArray[np.float32],
    flt: SearchFilter,
    *,
    mode: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    top_k: int = 5,
    text: str | None = None,
) -> list[ScoredNode]:
    """Run ``collapsed`` or ``traversal`` retrieval (hybrid given ``text``, see
    :func:`collapsed_tree`).

    Raises:
        ValueError: an unknown mode.
    """
    if mode == "traversal":
        return tree_traversal(
            store, query_vector, flt, top_k=top_k, max_tokens=max_tokens, text=text
        )
    if mode == "collapsed":
        return collapsed_tree(store, query_vector, flt, max_tokens=max_tokens, text=text)
    raise ValueError(f"mode must be 'collapsed' or 'traversal', not {mode!r}")


def answer_json(
    question: str, mode: str, tree: str, max_tokens: int, hits: Sequence[ScoredNode], seconds: float
) -> dict[str, Any]:
    """Return the JSON answer of ``adrap query --json`` and of the daemon's ``/query``."""
    return {
        "question": question,
        "mode": mode,
        "tree": tree,
        "max_tokens": max_tokens,
        "total_tokens": sum(h.node.n_tokens for h in hits),
        "seconds": round(seconds, 4),
        "hits": [h.to_json() for h in hits],
        "context": format_context(hits),
    }


def format_context(hits: Sequence[ScoredNode]) -> str:
    """Join the texts of hits into one context string, paragraphs separated by a blank line."""
    return "\n\n".join(h.node.text for h in hits)
