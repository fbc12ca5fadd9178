"""BM25 sparse vectors, and how a hybrid search fuses them with the dense vector.

Every node carries its text's BM25 vector under :data:`~retriever.schema.SPARSE_VECTOR`, written
with the node (both stores), so that exact terms (names, numbers, codes) that a small dense model
blurs still find their nodes. The encoder is the embedded engine's own (``qdrant_edge.Bm25``, the
same token ids as a Qdrant server's ``qdrant/bm25`` inference), with its default configuration
(k=1.2, b=0.75, avg_len=256, English stemming and stopwords); the collection's IDF modifier
supplies the inverse document frequencies at query time. A query is its unique tokens, weight 1.

A hybrid search is one Query API request: a dense prefetch and a sparse prefetch, both with the
search's filter and the same limit, fused (:class:`Fusion`). DBSF was chosen by
``bench/quality.py`` (docs/retrieval.md has the figures): as good as RRF on SQuAD, better on
HotpotQA, and its scores do not tie (RRF gives a node at rank r of one prefetch the score of
another node at rank r of the other, and the engine orders such ties as it likes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

import qdrant_edge as qe

#: RRF's k: a hit at rank r (0-based) of a prefetch adds 1 / (k + r).
RRF_K: Final = 60


@dataclass(frozen=True, slots=True)
class Fusion:
    """How the dense and sparse prefetches of a hybrid search are merged.

    Args:
        method: ``rrf`` (reciprocal rank fusion) or ``dbsf`` (distribution-based score fusion:
            each list's scores normalised by mean +- 3 standard deviations, then summed).
        k: RRF's k (larger: ranks further down still count).
        weights: RRF's weight of the dense and of the sparse prefetch (None: equal).
    """

    method: Literal["rrf", "dbsf"] = "dbsf"
    k: int = RRF_K
    weights: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.method not in ("rrf", "dbsf"):
            raise ValueError(f"fusion must be 'rrf' or 'dbsf', got {self.method!r}")
        if self.k < 1:
            raise ValueError(f"RRF k must be >= 1, got {self.k}")


DEFAULT_FUSION: Final = Fusion()

_local = threading.local()
_Id = TypeVar("_Id")
_Offset = TypeVar("_Offset")


def _model() -> qe.Bm25:
    model: qe.Bm25 | None = getattr(_local, "bm25", None)
    if model is None:  # one per thread: cheap to build, and no sharing to reason about
        model = _local.bm25 = qe.Bm25()
    return model


def edge_sparse_params() -> qe.EdgeSparseVectorParams:
    """The BM25 vector of a new shard: IDF applied by the engine, its inverted index in mapped
    files (``Memory.Cached``), not the engine's default of pinned RAM: 0.6-1.25 KB a point less
    anonymous memory once indexed (the kept RSS of a watcher; 30k leaves of 180 words: 4.25 ->
    3.0 KB), hybrid latency unchanged within noise (50k nodes, 1,200 paired queries: p50 3.29 /
    3.31 ms); the kernel keeps the pages while memory allows."""
    return qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=qe.Memory.Cached)


def bm25_documents(texts: Sequence[str]) -> list[qe.SparseVector]:
    """Return the BM25 document vector of each text (term-frequency weights; may be empty)."""
    model = _model()
    return [model.embed_document(t) for t in texts]


def bm25_query(text: str) -> qe.SparseVector:
    """Return the BM25 query vector of ``text``: its unique tokens, weight 1 (may be empty)."""
    return _model().embed_query(text)


def reindex_sparse(
    page: Callable[[_Offset | None], tuple[list[tuple[_Id, str]], _Offset | None]],
    write: Callable[[list[tuple[_Id, str]]], None],
) -> int:
    """Give every point its BM25 vector: ``page(offset)`` returns ``(id, text)`` rows and the next
    offset (None after the last page); ``write(rows)`` stores their vectors. Returns the count."""
    done, offset = 0, None
    while True:
        rows, offset = page(offset)
        if rows:
            write(rows)
            done += len(rows)
        if offset is None:
            return done
