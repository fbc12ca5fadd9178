"""Saying that nothing in the tree seems to answer: the best hit's similarity to the question
against a calibrated ``min_score`` (``ADRAP_QUERY__MIN_SCORE``, bench/no_match.py).

A dense ranking's scores are cosine similarities. A hybrid ranking's are fused (DBSF), on another
scale, so its best dense similarity among the first :data:`SIMILARITY_HITS` hits is used instead.

A hit that holds every word of the question (:func:`holds_every_word`) answers it whatever the
similarity: a few rare words (``zebra parade``) in a passage about something else score low as a
whole, and "nothing answers" would be said of the passage that holds them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retriever import ScoredNode
from retriever.sparse import bm25_documents, bm25_query

__all__ = ["SIMILARITY_HITS", "best_similarity", "holds_every_word", "match_fields"]

#: Hits whose dense similarity decides a hybrid answer's "nothing matches".
SIMILARITY_HITS = 10


def best_similarity(vector: NDArray[np.float32], X: NDArray[np.float32]) -> float | None:
    """The best cosine similarity of ``vector`` to the rows of ``X`` (None: no rows)."""
    if len(X) == 0:
        return None
    norms = np.linalg.norm(X, axis=1) * max(float(np.linalg.norm(vector)), 1e-12)
    return float(np.max(X @ vector / np.maximum(norms, 1e-12)))


def holds_every_word(question: str, texts: Iterable[str]) -> bool:
    """Whether one of ``texts`` holds every word of ``question`` that BM25 keeps (stemmed, stop
    words left out); False for a question of stop words only."""
    words = set(bm25_query(question).indices)
    return bool(words) and any(words <= set(d.indices) for d in bm25_documents(list(texts)))


def match_fields(
    similarity: float | None, hits: list[ScoredNode], min_score: float | None, question: str = ""
) -> dict[str, Any]:
    """``no_match``, ``best_score``, ``min_score`` of an answer: no match when the best hit's
    similarity (``similarity``, else the best hit's score) is below ``min_score`` and none of
    the first :data:`SIMILARITY_HITS` hits holds every word of ``question``; no hits: nothing
    to judge."""
    best = similarity if similarity is not None else max((h.score for h in hits), default=None)
    low = min_score is not None and best is not None and best < min_score
    if low and question:
        low = not holds_every_word(question, (h.node.text for h in hits[:SIMILARITY_HITS]))
    return {
        "no_match": low,
        "best_score": None if best is None else round(best, 6),
        "min_score": min_score,
    }
