"""The Query API's scoring queries and prefetches (qdrant-client's REST models) in the embedded
engine's terms: fusion, sparse vectors, MMR (what :mod:`retriever.facade.edge` hands over).

Served: a dense or sparse vector (``{"nearest": ...}`` too), a point id (its vector of ``using``),
a document ``{"text": ..., "model": "qdrant/bm25"}`` on ``bm25`` (what a server's inference does),
``nearest.mmr`` (diversity and candidates_limit as Qdrant reads them: the engine's lambda is
``1 - diversity``, the candidates default to the limit), ``{"fusion": "rrf" | "dbsf"}`` and
``{"rrf": {"k", "weights"}}`` over ``prefetch`` (nested prefetches too), each prefetch with its
own filter, params, limit and score threshold. Anything else raises ValueError naming it.

The reader filter (``access``) is ANDed with every prefetch's filter, nested ones too, and a
query by the id of a point the caller may not read finds no point (LookupError, as a missing id).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Final

import qdrant_edge as qe
from qdrant_client.http import models

from retriever.facade.filters import edge_filter, point_id, restrict
from retriever.schema import SPARSE_VECTOR
from retriever.sparse import bm25_query

#: Qdrant's RRF k when a request names none (``{"fusion": "rrf"}``).
QDRANT_RRF_K: Final = 2
#: The model name of Qdrant's BM25 inference: a document query with it is served.
BM25_MODEL: Final = "qdrant/bm25"
#: Qdrant's MMR diversity when a request names none.
QDRANT_MMR_DIVERSITY: Final = 0.5


class QueryTranslator:
    """Builds the engine's queries for one request.

    Args:
        vector_of: ``(point id, vector name)`` -> the point's vector (a query by id).
        params: ``(given params, engine filter, limit, is_dense)`` -> the engine's search params
            (adrap's plan for a dense query that sent none).
        check_using: raises ValueError for a vector name the collection lacks; returns it
            (``None``: the dense vector).
        access: the reader filter, ANDed with every prefetch's (None: an unrestricted caller).
    """

    def __init__(
        self,
        vector_of: Callable[[qe.PointId, str], Any],
        params: Callable[[models.SearchParams | None, qe.Filter | None, int, bool], Any],
        check_using: Callable[[str | None], str],
        *,
        access: qe.Filter | None = None,
    ) -> None:
        self.vector_of = vector_of
        self.params = params
        self.check_using = check_using
        self.access = access

    def prefetches(self, given: Any, outer: qe.Filter | None) -> list[qe.Prefetch] | None:
        """Translate ``prefetch`` (one or a list); ``None`` stays ``None``."""
        if given is None:
            return None
        return [self.prefetch(p, outer) for p in (given if isinstance(given, list) else [given])]

    def prefetch(self, p: models.Prefetch, outer: qe.Filter | None) -> qe.Prefetch:
        if p.lookup_from is not None:
            raise ValueError("'prefetch.lookup_from' is not supported by adrap's facade; drop it")
        limit = 10 if p.limit is None else p.limit
        flt = restrict(edge_filter(p.filter), self.access)
        query, dense = self.scoring(p.query, p.using, limit)
        return qe.Prefetch(
            limit=limit,
            query=query,
            prefetches=self.prefetches(p.prefetch, outer),
            params=self.params(p.params, _both(flt, outer), limit, dense) if query else None,
            filter=flt,
            score_threshold=p.score_threshold,
        )

    def scoring(self, query: Any, using: str | None, limit: int) -> tuple[Any, bool]:
        """Return the engine's scoring query and whether it is a dense nearest query."""
        if query is None:
            return None, False
        if isinstance(query, models.FusionQuery):
            if query.fusion == models.Fusion.DBSF:
                return qe.Fusion.Dbsf(), False
            return qe.Fusion.Rrf(k=QDRANT_RRF_K), False
        if isinstance(query, models.RrfQuery):
            k = QDRANT_RRF_K if query.rrf.k is None else query.rrf.k
            return qe.Fusion.Rrf(k=k, weights=query.rrf.weights), False
        name = self.check_using(using)
        mmr = None
        if isinstance(query, models.NearestQuery):
            query, mmr = query.nearest, query.mmr
        vector = self.vector(query, name)
        if mmr is not None:
            diversity = QDRANT_MMR_DIVERSITY if mmr.diversity is None else mmr.diversity
            candidates = limit if mmr.candidates_limit is None else mmr.candidates_limit
            return qe.Mmr(vector, 1.0 - diversity, max(candidates, limit), using=name), False
        return qe.Query.Nearest(vector, using=name), isinstance(vector, list)

    def vector(self, query: Any, name: str) -> list[float] | qe.SparseVector:
        if isinstance(query, models.Document):
            return _bm25_document(query, name)
        if isinstance(query, models.SparseVector):
            return qe.SparseVector(list(query.indices), [float(v) for v in query.values])
        if isinstance(query, int | str | uuid.UUID):
            return self.vector_of(point_id(query), name)  # type: ignore[no-any-return]
        if isinstance(query, list) and all(isinstance(x, int | float) for x in query):
            return [float(x) for x in query]
        raise ValueError(
            f"query of type {type(query).__name__} is not supported by adrap's read-only Qdrant "
            "facade: send a dense or sparse vector, {'nearest': ...} (with 'mmr'), a point id, "
            "or {'fusion': 'rrf' | 'dbsf'} / {'rrf': {'k': ...}} over 'prefetch'"
        )


def stored_vector(
    shard: qe.EdgeShard, point: qe.PointId, name: str, *, access: qe.Filter | None = None
) -> Any:
    """Return the vector ``name`` of a stored point (a query by point id) that passes the
    reader filter ``access`` (None: any point).

    Raises:
        LookupError: no such point (or not one the caller may read), or it has no such vector.
    """
    if access is not None:
        found = qe.CountRequest(
            exact=True, filter=qe.Filter(must=[qe.HasIdCondition({point}), access])
        )
        if not shard.count(found):
            raise LookupError(f"Not found: No point with id {point} found")
    records = shard.retrieve([point], False, [name])
    vectors = records[0].vector if records else None
    if not isinstance(vectors, dict) or name not in vectors:
        raise LookupError(f"Not found: No point with id {point} found")
    return vectors[name]


def _bm25_document(doc: models.Document, name: str) -> qe.SparseVector:
    """A ``{"text": ..., "model": "qdrant/bm25"}`` query on the BM25 vector: the engine's BM25
    encoder, the one a Qdrant server's inference runs for that model."""
    if doc.model.lower() != BM25_MODEL or name != SPARSE_VECTOR or doc.options:
        raise ValueError(
            f"a document query is served for model {BM25_MODEL!r} on vector {SPARSE_VECTOR!r} "
            f"without options (got model {doc.model!r} on {name!r}); embed other queries "
            "yourself and send the vector"
        )
    return bm25_query(doc.text)


def _both(inner: qe.Filter | None, outer: qe.Filter | None) -> qe.Filter | None:
    if inner is None or outer is None:
        return inner if outer is None else outer
    return qe.Filter(must=[inner, outer])
