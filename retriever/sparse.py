"""BM25 sparse vectors, and how a hybrid search fuses them with the dense vector.

Every node carries its text's BM25 vector under :data:`~retriever.schema.SPARSE_VECTOR`, written
with the node (both stores), so that exact terms (names, numbers, codes) that a small dense model
blurs still find their nodes. The encoder is the embedded engine's own (``qdrant_edge.Bm25``, the
same token ids as a Qdrant server's ``qdrant/bm25`` inference), with its default configuration
(k=1.2, b=0.75, avg_len=256, English stemming and stopwords); the collection's IDF modifier
supplies the inverse document frequencies at query time. A query is its unique tokens, weight 1.

A hybrid search is one Query API request: a dense prefetch and a sparse prefetch, both with the
search's filter, fused (:class:`Fusion`). The sparse prefetch is bounded (:class:`HybridBound`):
the engine walks the posting list of every query term, and a term found in most nodes costs a
walk of most of the store for almost no score (its IDF is near 0); the query keeps its rarest
terms while their estimated postings fit a budget, the document frequencies estimated from a
sample of the store's own BM25 vectors (:class:`TermSample`). DBSF was chosen by
``bench/quality.py`` (docs/retrieval.md has the figures): as good as RRF on SQuAD, better on
HotpotQA, and its scores do not tie (RRF gives a node at rank r of one prefetch the score of
another node at rank r of the other, and the engine orders such ties as it likes).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
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

#: A hybrid query's BM25 terms may together have about this many postings (estimated): past it
#: the commonest terms are dropped (bench/query_hybrid.py; see :class:`HybridBound`).
SPARSE_POSTINGS: Final = 20_000
#: A hybrid query's prefetches ask for at most this many hits (never fewer than the fused hits
#: asked for): ``search_budget``'s first query fuses 32 (bench/query_hybrid.py).
PREFETCH_DEPTH: Final = 32
#: Points whose BM25 vectors :class:`TermSample` reads (~55 us a point on the embedded engine).
SAMPLE_POINTS: Final = 512
#: Seconds a :class:`TermSample` is used before it is read again.
SAMPLE_TTL: Final = 300.0


@dataclass(frozen=True, slots=True)
class HybridBound:
    """How much a hybrid search's prefetches may fetch, the BM25 one above all.

    Args:
        postings: The BM25 query keeps its rarest terms (by the :class:`TermSample`'s estimate)
            while their estimated postings together stay within this many; the rarest term is
            always kept. ``None``: every term (unbounded).
        depth: Hits of each prefetch at most, never fewer than the fused hits asked for
            (``None``: the candidate depth the caller asks for).
        sparse_depth: Hits of the BM25 prefetch at most (``None``: as the dense prefetch).
    """

    postings: int | None = SPARSE_POSTINGS
    depth: int | None = PREFETCH_DEPTH
    sparse_depth: int | None = None

    def __post_init__(self) -> None:
        for name in ("postings", "depth", "sparse_depth"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"hybrid bound {name} must be >= 1 (None: unbounded), got {value}")

    def depths(self, limit: int, depth: int) -> tuple[int, int]:
        """Return the dense and the BM25 prefetch's hits for ``limit`` fused hits out of
        ``depth`` candidates."""
        dense = max(limit, depth if self.depth is None else min(depth, self.depth))
        return dense, dense if self.sparse_depth is None else min(dense, self.sparse_depth)


DEFAULT_BOUND: Final = HybridBound()
#: Every term, prefetches as deep as the caller asks: the hybrid query before the bound.
UNBOUNDED: Final = HybridBound(postings=None, depth=None)


@dataclass(frozen=True, slots=True)
class TermSample:
    """Document frequencies estimated from the BM25 vectors of a sample of a store's points.

    Args:
        counts: Per term id, the sampled points that have it.
        sampled: The points sampled (with a BM25 vector).
        points: The store's points.
        taken: When (``time.monotonic()``).
    """

    counts: dict[int, int]
    sampled: int
    points: int
    taken: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, terms: Iterable[Sequence[int]], points: int) -> TermSample:
        """Return the sample of points whose BM25 vectors have these term ids."""
        counts: Counter[int] = Counter()
        sampled = 0
        for indices in terms:
            counts.update(indices)
            sampled += 1
        return cls(dict(counts), sampled, max(points, sampled))

    def postings(self, term: int) -> float:
        """Return the estimated number of points that have ``term`` (0: none sampled)."""
        return self.counts.get(term, 0) * self.points / self.sampled if self.sampled else 0.0

    def stale(self, now: float | None = None) -> bool:
        """Return whether the sample is older than :data:`SAMPLE_TTL`."""
        return (time.monotonic() if now is None else now) - self.taken > SAMPLE_TTL


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


def bounded_query(
    text: str, sample: TermSample | None, bound: HybridBound, hits: int = 0
) -> qe.SparseVector:
    """Return :func:`bm25_query` of ``text`` cut to ``bound``: its terms rarest first (a term
    not sampled is rarest) while their estimated postings are fewer than ``hits`` (the BM25
    prefetch's: a list of a hit or two would make DBSF's normalisation degenerate, a lone hit
    scoring 0.5 however well it matched) or fit ``bound.postings``. Without a sample (or bound)
    every term is kept. Terms stay in id order."""
    query = bm25_query(text)
    if bound.postings is None or sample is None or len(query.indices) < 2:
        return query
    kept: list[tuple[int, float]] = []
    total = 0.0
    for est, term, weight in sorted(
        (sample.postings(i), i, v) for i, v in zip(query.indices, query.values, strict=True)
    ):
        if kept and total >= hits and total + est > bound.postings:
            break
        kept.append((term, weight))
        total += est
    if len(kept) == len(query.indices):
        return query
    kept.sort()
    return qe.SparseVector(indices=[i for i, _ in kept], values=[v for _, v in kept])


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
