"""Qdrant's REST read API over a Qdrant server's collection, with the reader filter added.

In server mode the tree lives in a Qdrant server, which any client could read whole: the server
knows no adrap reader (Qdrant's JWT claims carry no payload filter since 1.15). The daemon's
facade (:mod:`ingestor.service.qdrant_rest`) therefore serves the server's collection too, through
this reader: the same requests as over the embedded store (qdrant-client's REST models, the same
routes), sent on to the server with the reader filter ANDed in, the top-level filter and every
prefetch's, the client's own kept whole as one ``must`` condition so that no ``should``,
``must_not`` or ``min_should`` of its loosens it. A point the caller may not read is not found: left
out of a retrieve, "not found" when it is the query's point (a query by id). The reserved meta point
stays readable to every caller. The collection's info counts the points the caller may read.

Only reads that cannot reach a point through the back door are sent on: nearest queries (a dense
or sparse vector, or a point id the caller may read), prefetches with fusion, no query (points by
filter), the legacy search, scroll, retrieve and count. Recommend, discover, context, order-by,
formula and sample queries, ``lookup_from`` and inference documents raise ValueError naming the
part (the facade answers 400). Direct access to the Qdrant server bypasses all of this: keep its
port and api-key from the readers (docs/security.md).
"""

from __future__ import annotations

import uuid
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client.http import models

from retriever.facade.edge import MAX_POINTS, bounded_page, refuse_part
from retriever.facade.io import NamedVectorIn, RestSearchRequest
from retriever.qdrant_translate import access_conditions
from retriever.schema import META_POINT_ID, META_TREE, SPARSE_VECTOR, VECTOR_NAME, F

__all__ = ["ServerRestReader", "server_access_filter"]

_ID = (int, str, uuid.UUID)
_VECTOR = (list, models.SparseVector)


def server_access_filter(readable: tuple[str, ...] | None) -> models.Filter | None:
    """Return the filter of the points a caller who may read ``readable`` may read (None: an
    unrestricted caller): a node whose every listed access class is readable, at least one
    listed, or the reserved meta point (it says which model embeds the queries)."""
    if readable is None:
        return None
    meta = models.Filter(
        must=[
            models.HasIdCondition(has_id=[META_POINT_ID]),
            models.FieldCondition(key=F.TREE, match=models.MatchValue(value=META_TREE)),
        ]
    )
    if not readable:
        return models.Filter(should=[meta])
    listed, outside = access_conditions(readable)
    nodes = models.Filter(must=[listed], must_not=[outside])
    return models.Filter(should=[nodes, meta])


def _restrict(given: models.Filter | None, access: models.Filter | None) -> models.Filter | None:
    if access is None:
        return given
    if given is None:
        return access
    return models.Filter(must=[given, access])


def _using(using: str | None, query: Any) -> str | None:
    """The vector a query names, or adrap's by default (its dense vector; ``bm25`` for a sparse
    one), as the embedded store's facade does; none where the query scores nothing itself."""
    if (
        using is not None
        or query is None
        or isinstance(query, (models.FusionQuery, models.RrfQuery))
    ):
        return using
    nearest = query.nearest if isinstance(query, models.NearestQuery) else query
    return SPARSE_VECTOR if isinstance(nearest, models.SparseVector) else VECTOR_NAME


class ServerRestReader:
    """Answers Qdrant REST read requests for ``collection`` of the server ``client`` reaches.

    Args:
        client: a client of the Qdrant server (the daemon's store's; thread-safe).
        collection: the collection (or alias) the tree is in, and the name clients address.
    """

    def __init__(self, client: QdrantClient, collection: str) -> None:
        self.client = client
        self.collection = collection

    def exists(self) -> bool:
        """Return True once the collection exists (the first build created it)."""
        return bool(self.client.collection_exists(self.collection))

    def info(self, readable: tuple[str, ...] | None = None) -> models.CollectionInfo:
        """Return the server's collection info; for a restricted caller (``readable``), the
        counts are of the points it may read."""
        info = self.client.get_collection(self.collection)
        access = server_access_filter(readable)
        if access is None:
            return info
        seen = self.client.count(self.collection, count_filter=access, exact=True).count

        def capped(n: int | None) -> int | None:
            return None if n is None else min(n, seen)

        schema = {
            key: index.model_copy(update={"points": capped(index.points) or 0})
            for key, index in (info.payload_schema or {}).items()
        }
        return info.model_copy(
            update={
                "points_count": capped(info.points_count),
                "indexed_vectors_count": capped(info.indexed_vectors_count),
                "vectors_count": None,
                "payload_schema": schema,
            }
        )

    def query(
        self, req: models.QueryRequest, readable: tuple[str, ...] | None = None
    ) -> models.QueryResponse:
        """Run a Query API request as a caller who may read ``readable`` (None: everything).

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
            LookupError: the query's point (a query by id) is not one the caller may read.
        """
        refuse_part(req.lookup_from, "lookup_from")
        refuse_part(req.shard_key, "shard_key")
        limit, offset = bounded_page(req.limit, req.offset)
        access = server_access_filter(readable)
        query = self._checked_query(req.query, access)
        prefetch = self._prefetch(req.prefetch, access)
        return self.client.query_points(
            self.collection,
            query=query,
            using=_using(req.using, query),
            prefetch=prefetch,
            query_filter=_restrict(req.filter, access),
            search_params=req.params,
            limit=limit,
            offset=offset,
            with_payload=False if req.with_payload is None else req.with_payload,
            with_vectors=False if req.with_vector is None else req.with_vector,
            score_threshold=req.score_threshold,
        )

    def search(
        self, req: RestSearchRequest, readable: tuple[str, ...] | None = None
    ) -> list[models.ScoredPoint]:
        """Run a legacy search (a nearest query) as a caller who may read ``readable``.

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
        """
        refuse_part(req.shard_key, "shard_key")
        using, vector = (
            (req.vector.name, req.vector.vector)
            if isinstance(req.vector, NamedVectorIn)
            else (None, req.vector)
        )
        nearest = models.QueryRequest(
            query=list(vector),
            using=using or VECTOR_NAME,
            filter=req.filter,
            params=req.params,
            limit=req.limit,
            offset=req.offset,
            with_payload=req.with_payload,
            with_vector=req.with_vector,
            score_threshold=req.score_threshold,
        )
        return self.query(nearest, readable).points

    def scroll(
        self, req: models.ScrollRequest, readable: tuple[str, ...] | None = None
    ) -> models.ScrollResult:
        """Return one page of the points a caller who may read ``readable`` may read.

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
        """
        refuse_part(req.shard_key, "shard_key")
        refuse_part(req.order_by, "order_by")
        limit, _ = bounded_page(req.limit, None)
        points, after = self.client.scroll(
            self.collection,
            scroll_filter=_restrict(req.filter, server_access_filter(readable)),
            limit=limit,
            offset=req.offset,
            with_payload=True if req.with_payload is None else req.with_payload,
            with_vectors=False if req.with_vector is None else req.with_vector,
        )
        return models.ScrollResult(points=points, next_page_offset=after)

    def retrieve(
        self, req: models.PointRequest, readable: tuple[str, ...] | None = None
    ) -> list[models.Record]:
        """Return the points with these ids that exist and that the caller may read; the others
        are left out, as missing ones are.

        Raises:
            ValueError: too many ids.
        """
        refuse_part(req.shard_key, "shard_key")
        if len(req.ids) > MAX_POINTS:
            raise ValueError(f"{len(req.ids)} ids is over the {MAX_POINTS} a request may ask for")
        ids = list(dict.fromkeys(req.ids))
        payload = True if req.with_payload is None else req.with_payload
        vectors = False if req.with_vector is None else req.with_vector
        access = server_access_filter(readable)
        if access is None:
            return self.client.retrieve(
                self.collection, ids, with_payload=payload, with_vectors=vectors
            )
        if not ids:
            return []
        points, _ = self.client.scroll(
            self.collection,
            scroll_filter=models.Filter(must=[models.HasIdCondition(has_id=ids), access]),
            limit=len(ids),
            with_payload=payload,
            with_vectors=vectors,
        )
        return points

    def count(
        self, req: models.CountRequest, readable: tuple[str, ...] | None = None
    ) -> models.CountResult:
        """Count the points matching the filter that the caller may read."""
        refuse_part(req.shard_key, "shard_key")
        flt = _restrict(req.filter, server_access_filter(readable))
        return self.client.count(self.collection, count_filter=flt, exact=req.exact is not False)

    def facet(
        self, req: models.FacetRequest, readable: tuple[str, ...] | None = None
    ) -> models.FacetResponse:
        """Count a payload key's values among the points matching the filter that the caller
        may read."""
        refuse_part(req.shard_key, "shard_key")
        limit, _ = bounded_page(req.limit, 0)
        return self.client.facet(
            self.collection,
            key=req.key,
            facet_filter=_restrict(req.filter, server_access_filter(readable)),
            limit=limit,
            exact=bool(req.exact),
        )

    # -- the queries a caller may send on ------------------------------------------------------

    def _checked_query(self, query: Any, access: models.Filter | None) -> Any:
        """Return ``query`` if it reaches only what the caller may read, else raise."""
        if query is None or isinstance(query, (*_VECTOR, models.FusionQuery, models.RrfQuery)):
            return query
        if isinstance(query, models.NearestQuery):
            self._checked_query(query.nearest, access)
            return query
        if isinstance(query, _ID):
            self._readable_point(query, access)
            return query
        raise ValueError(
            f"query of type {type(query).__name__} is not supported by adrap's read-only Qdrant "
            "facade: send a dense or sparse vector, {'nearest': ...}, a point id or a fusion"
        )

    def _prefetch(self, given: Any, access: models.Filter | None) -> Any:
        """Every prefetch (nested ones too) with the reader filter ANDed into its own."""
        if given is None:
            return None
        many = given if isinstance(given, list) else [given]
        out = []
        for p in many:
            refuse_part(p.lookup_from, "lookup_from")
            out.append(
                p.model_copy(
                    update={
                        "query": self._checked_query(p.query, access),
                        "using": _using(p.using, p.query),
                        "filter": _restrict(p.filter, access),
                        "prefetch": self._prefetch(p.prefetch, access),
                    }
                )
            )
        return out

    def _readable_point(self, point: Any, access: models.Filter | None) -> None:
        """Raise LookupError unless ``point`` exists and the caller may read it."""
        flt = models.Filter(must=[models.HasIdCondition(has_id=[point])])
        if self.client.count(self.collection, count_filter=_restrict(flt, access)).count == 0:
            raise LookupError(f"Not found: No point with id {point} found")
