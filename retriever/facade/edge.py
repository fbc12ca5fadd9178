"""Qdrant's REST read API over the embedded store: qdrant-client's REST models in, engine calls, models out.

Why: the embedded shard can be opened by one process only, so while ``adrap watch`` owns it no
Qdrant client could read the tree. The daemon therefore serves Qdrant's own read endpoints
(:mod:`ingestor.service.qdrant_rest`); this module does the translation, so it is tested on a real
shard without HTTP and the engine's types stay inside the retriever. Requests are qdrant-client's
REST models (``qdrant_client.http.models``) and replies are built from them too, so both stay
faithful to what real clients send and parse.

Supported: collection info; the Query API's nearest query (a dense or sparse vector,
``{"nearest": ...}`` with or without ``mmr``, or a point id), ``prefetch`` with fusion (``rrf``
with its k and weights, ``dbsf``; :mod:`retriever.facade.query`), no query (points by id),
``filter``, ``limit``, ``offset``, ``score_threshold``, ``with_payload``, ``with_vector``,
``params``; the legacy search; scroll; retrieve by ids; count. Every filter condition Qdrant has
but slices (:mod:`retriever.facade.filters`). ``using`` may be omitted: the dense vector,
``dense``; ``bm25`` is the sparse one. A dense query without ``params`` is planned as adrap's own
searches are (:mod:`retriever.plan`), so the same filter gives the same hits as ``adrap query``.
Anything else (recommend, documents for inference, order_by, shard keys) raises ValueError
naming the part, which the facade answers with 400.

Who may read what (issue 53): every method takes ``readable``, the access classes the caller may
read (None: an unrestricted caller). The reader filter
(:func:`~retriever.facade.filters.access_filter`) is ANDed with whatever filter the client
sent, the top-level one and every prefetch's, the client's kept whole as one ``must`` condition
(:func:`~retriever.facade.filters.restrict`), so no ``should``/``must_not``/``min_should`` of
its own loosens it. A point the caller may not read is not found: left out of a retrieve, a 404
when it is the query's point (a query by id). The reserved meta point names no access class and
stays readable to every caller. The collection's info counts the points the caller may read.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final, Protocol, TypeVar

import qdrant_edge as qe
from qdrant_client.http import models

from retriever.edge_store import edge_search_params
from retriever.errors import StoreError
from retriever.facade.filters import access_filter, edge_filter, point_id, restrict
from retriever.facade.io import (
    NamedVectorIn,
    out_id,
    record,
    scored,
    with_payload,
    with_vector,
)
from retriever.facade.io import RestSearchRequest as RestSearchRequest  # retriever's export
from retriever.facade.query import QueryTranslator, stored_vector
from retriever.plan import HnswConfig, Planner, StoreIndex
from retriever.schema import SPARSE_VECTOR, VECTOR_NAME, vector_names

_T = TypeVar("_T")

#: Most points one request may ask for (``limit + offset``, or ids); beyond, page.
MAX_POINTS: Final = 10_000


class ShardReader(Protocol):
    """What the reader needs of the store: :class:`~retriever.edge_store.EdgeNodeStore` (the
    daemon's: behind its lock, ``ingestor.service.concurrency.LockedShard``); read only."""

    @property
    def dim(self) -> int | None: ...

    @property
    def planner(self) -> Planner: ...

    @property
    def hnsw(self) -> HnswConfig: ...

    @property
    def index(self) -> StoreIndex: ...

    def read_shard(self, action: str, read: Callable[[qe.EdgeShard], _T]) -> _T: ...


class EdgeRestReader:
    """Answers Qdrant REST read requests for one collection, the embedded store ``store``.

    Args:
        store: the store (the daemon passes its locked proxy: each call holds the store's lock).
        collection: the name clients address (``ADRAP_QDRANT__COLLECTION``, default ``adrap``).
    """

    def __init__(self, store: ShardReader, collection: str) -> None:
        self.store = store
        self.collection = collection

    def exists(self) -> bool:
        """Return True once the store holds a shard (the first build created it)."""
        try:
            return self.store.read_shard("check the store", lambda _: True)
        except StoreError:
            return False

    def info(self, readable: tuple[str, ...] | None = None) -> models.CollectionInfo:
        """Return the collection's statistics and configuration as Qdrant describes its own;
        for a restricted caller (``readable``), the counts are of the points it may read."""
        access = access_filter(readable)

        def read(s: qe.EdgeShard) -> tuple[Any, int | None]:
            seen = None if access is None else s.count(qe.CountRequest(exact=True, filter=access))
            return s.info(), seen

        shard_info, seen = self.store.read_shard("read the store's info", read)
        hnsw, dim = self.store.hnsw, self.store.dim or 0

        def capped(n: int) -> int:
            return n if seen is None else min(n, seen)

        schema = {
            key: models.PayloadIndexInfo(
                data_type=models.PayloadSchemaType(str(index.data_type).rsplit(".", 1)[-1].lower()),
                points=capped(index.points),
            )
            for key, index in shard_info.payload_schema.items()
        }
        config = models.CollectionConfig(
            params=models.CollectionParams(
                vectors={
                    name: models.VectorParams(size=dim, distance=models.Distance.COSINE)
                    for name in self._dense_names()
                },
                sparse_vectors={
                    SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)
                }
                if self.store.index.sparse
                else None,
            ),
            hnsw_config=models.HnswConfig(
                m=hnsw.m, ef_construct=hnsw.ef_construct, full_scan_threshold=hnsw.scan_kb(dim)
            ),
            optimizer_config=models.OptimizersConfig(
                default_segment_number=0, flush_interval_sec=0, indexing_threshold=hnsw.indexing_kb
            ),
        )
        return models.CollectionInfo(
            status=models.CollectionStatus.GREEN,
            optimizer_status=models.OptimizersStatusOneOf.OK,
            indexed_vectors_count=capped(shard_info.indexed_vectors_count),
            points_count=capped(shard_info.points_count),
            segments_count=shard_info.segments_count,
            config=config,
            payload_schema=schema,
        )

    def query(
        self, req: models.QueryRequest, readable: tuple[str, ...] | None = None
    ) -> models.QueryResponse:
        """Run a Query API request (``POST /collections/{name}/points/query``) as a caller who
        may read ``readable`` (None: everything).

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
            LookupError: the query's point (a query by id) is not one the caller may read.
        """
        refuse_part(req.lookup_from, "lookup_from")
        refuse_part(req.shard_key, "shard_key")
        limit, offset = bounded_page(req.limit, req.offset)
        access = access_filter(readable)
        flt = restrict(edge_filter(req.filter), access)
        payload, vector = with_payload(req.with_payload, False), with_vector(req.with_vector)
        query = req.query
        if req.prefetch is not None or _composite(query):
            return models.QueryResponse(points=[scored(p) for p in self._composite(req, access)])
        if isinstance(query, models.NearestQuery):
            query = query.nearest
        if query is None:  # no scoring: points in id order, as Qdrant does
            request = qe.QueryRequest(
                limit=limit,
                offset=offset,
                filter=flt,
                with_payload=payload,
                with_vector=vector,
                score_threshold=req.score_threshold,
            )
            hits = self.store.read_shard("query points", lambda s: s.query(request))
            return models.QueryResponse(points=[scored(p) for p in hits])
        if isinstance(query, int | str | uuid.UUID):
            by_id = point_id(query)
            dense = self._vector_of(by_id, access)
            excluded = qe.Filter(must_not=[qe.HasIdCondition({by_id})])
            flt = excluded if flt is None else qe.Filter(must=[flt, excluded])
            query = dense
        hits = self._nearest(
            _dense(query),
            req.using,
            flt,
            limit,
            offset,
            req.params,
            payload,
            vector,
            req.score_threshold,
        )
        return models.QueryResponse(points=[scored(p) for p in hits])

    def search(
        self, req: RestSearchRequest, readable: tuple[str, ...] | None = None
    ) -> list[models.ScoredPoint]:
        """Run a legacy search (``POST /collections/{name}/points/search``) as a caller who may
        read ``readable``.

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
        """
        refuse_part(req.shard_key, "shard_key")
        limit, offset = bounded_page(req.limit, req.offset)
        using, vec = (
            (req.vector.name, req.vector.vector)
            if isinstance(req.vector, NamedVectorIn)
            else (None, req.vector)
        )
        hits = self._nearest(
            vec,
            using,
            restrict(edge_filter(req.filter), access_filter(readable)),
            limit,
            offset,
            req.params,
            with_payload(req.with_payload, False),
            with_vector(req.with_vector),
            req.score_threshold,
        )
        return [scored(p) for p in hits]

    def scroll(
        self, req: models.ScrollRequest, readable: tuple[str, ...] | None = None
    ) -> models.ScrollResult:
        """Return one page of the points a caller who may read ``readable`` may read, in id
        order (``POST /collections/{name}/points/scroll``).

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
        """
        refuse_part(req.shard_key, "shard_key")
        refuse_part(req.order_by, "order_by")
        limit, _ = bounded_page(req.limit, None)
        request = qe.ScrollRequest(
            offset=None if req.offset is None else point_id(req.offset),
            limit=limit,
            filter=restrict(edge_filter(req.filter), access_filter(readable)),
            with_payload=with_payload(req.with_payload, True),
            with_vector=with_vector(req.with_vector),
        )
        records, after = self.store.read_shard("scroll points", lambda s: s.scroll(request))
        return models.ScrollResult(
            points=[record(r) for r in records],
            next_page_offset=None if after is None else out_id(after),
        )

    def retrieve(
        self, req: models.PointRequest, readable: tuple[str, ...] | None = None
    ) -> list[models.Record]:
        """Return the points with these ids that exist and that a caller who may read
        ``readable`` may read (``POST /collections/{name}/points``); the others are left out,
        as missing ones are.

        Raises:
            ValueError: an id is neither an unsigned integer nor a UUID, or too many ids.
        """
        refuse_part(req.shard_key, "shard_key")
        if len(req.ids) > MAX_POINTS:
            raise ValueError(f"{len(req.ids)} ids is over the {MAX_POINTS} a request may ask for")
        ids = list(dict.fromkeys(point_id(i) for i in req.ids))
        payload, vector = with_payload(req.with_payload, True), with_vector(req.with_vector)
        access = access_filter(readable)

        def read(s: qe.EdgeShard) -> list[qe.Record]:
            records = s.retrieve(ids, payload, vector)
            if access is None or not records:
                return records
            allowed = visible(s, [r.id for r in records], access)
            return [r for r in records if r.id in allowed]

        records = self.store.read_shard(f"retrieve {len(ids)} points", read)
        return [record(r) for r in records]

    def count(
        self, req: models.CountRequest, readable: tuple[str, ...] | None = None
    ) -> models.CountResult:
        """Count the points matching the filter that a caller who may read ``readable`` may
        read (``POST /collections/{name}/points/count``)."""
        refuse_part(req.shard_key, "shard_key")
        flt = restrict(edge_filter(req.filter), access_filter(readable))
        request = qe.CountRequest(exact=req.exact is not False, filter=flt)
        return models.CountResult(count=self.store.read_shard("count", lambda s: s.count(request)))

    def facet(
        self, req: models.FacetRequest, readable: tuple[str, ...] | None = None
    ) -> models.FacetResponse:
        """Count the values of an indexed payload key among the points matching the filter that
        a caller who may read ``readable`` may read (``POST /collections/{name}/facet``)."""
        refuse_part(req.shard_key, "shard_key")
        flt = restrict(edge_filter(req.filter), access_filter(readable))
        limit, _ = bounded_page(req.limit, 0)
        request = qe.FacetRequest(key=req.key, limit=limit, exact=bool(req.exact), filter=flt)
        got = self.store.read_shard(f"facet on {req.key!r}", lambda s: s.facet(request))
        return models.FacetResponse(
            hits=[models.FacetValueHit(value=h.value, count=h.count) for h in got.hits]
        )

    def _composite(
        self, req: models.QueryRequest, access: qe.Filter | None
    ) -> list[qe.ScoredPoint]:
        """A query with prefetches, fusion, a sparse vector or MMR: translated as a whole, the
        reader filter ``access`` on the query and on every prefetch."""
        limit, offset = bounded_page(req.limit, req.offset)
        flt = restrict(edge_filter(req.filter), access)

        bad: list[Exception] = []  # the request's own faults: 400/404, not a store failure

        def run(shard: qe.EdgeShard) -> list[qe.ScoredPoint]:
            try:
                return shard.query(translated(shard))
            except (ValueError, LookupError) as exc:
                bad.append(exc)
                return []

        def translated(shard: qe.EdgeShard) -> qe.QueryRequest:
            def params(given: Any, where: qe.Filter | None, n: int, dense: bool) -> Any:
                return self._params(shard, given, where, n) if dense else None

            translate = QueryTranslator(
                partial(stored_vector, shard, access=access), params, self._using, access=access
            )
            scoring, dense = translate.scoring(req.query, req.using, limit + offset)
            prefetches = translate.prefetches(req.prefetch, flt)
            request = qe.QueryRequest(
                limit=limit,
                offset=offset,
                query=scoring,
                prefetches=prefetches,
                filter=flt,
                with_payload=with_payload(req.with_payload, False),
                with_vector=with_vector(req.with_vector),
                score_threshold=req.score_threshold,
                params=params(req.params, flt, limit + offset, dense and not prefetches),
            )
            return request

        hits = self.store.read_shard("query points", run)
        if bad:
            raise bad[0]
        return hits

    def _using(self, using: str | None) -> str:
        names = self._vector_names()
        if using is not None and using not in names:
            raise ValueError(
                f"Wrong input: Not existing vector name error: {using} "
                f"(adrap's collection has {', '.join(map(repr, names))})"
            )
        return using or VECTOR_NAME

    def _dense_names(self) -> tuple[str, ...]:
        index = self.store.index
        return vector_names(leaf_vector=index.leaf_vector, summary_vector=index.summary_vector)

    def _vector_names(self) -> tuple[str, ...]:
        dense = self._dense_names()
        return (*dense, SPARSE_VECTOR) if self.store.index.sparse else dense

    def _vector_of(self, point: qe.PointId, access: qe.Filter | None) -> list[float]:
        def read(s: qe.EdgeShard) -> list[qe.Record]:
            if access is not None and not visible(s, [point], access):
                return []  # a point the caller may not read is not found
            return s.retrieve([point], False, [VECTOR_NAME])

        records = self.store.read_shard("retrieve the query point", read)
        vectors = records[0].vector if records else None
        if not isinstance(vectors, dict):
            raise LookupError(f"Not found: No point with id {point} found")
        return _dense(vectors.get(VECTOR_NAME))

    def _nearest(
        self,
        vector: Sequence[float],
        using: str | None,
        flt: qe.Filter | None,
        limit: int,
        offset: int,
        params: models.SearchParams | None,
        with_payload: Any,
        with_vector: Any,
        score_threshold: float | None,
    ) -> list[qe.ScoredPoint]:
        name = self._using(using)
        if self.store.dim is not None and len(vector) != self.store.dim:
            raise ValueError(
                f"Wrong input: Vector dimension error: expected dim: {self.store.dim}, got "
                f"{len(vector)} (embed the query with the model named in the meta point)"
            )
        query = qe.Query.Nearest([float(x) for x in vector], using=name)

        def run(shard: qe.EdgeShard) -> list[qe.ScoredPoint]:
            request = qe.QueryRequest(
                limit=limit,
                offset=offset,
                query=query,
                filter=flt,
                with_payload=with_payload,
                with_vector=with_vector,
                score_threshold=score_threshold,
                params=self._params(shard, params, flt, limit + offset),
            )
            return shard.query(request)

        return self.store.read_shard("query points", run)

    def _params(
        self,
        shard: qe.EdgeShard,
        given: models.SearchParams | None,
        flt: qe.Filter | None,
        limit: int,
    ) -> qe.SearchParams:
        """The client's search params, or adrap's plan (:mod:`retriever.plan`) when it sent none."""
        if given is not None and (given.hnsw_ef is not None or given.exact):
            return qe.SearchParams(
                hnsw_ef=given.hnsw_ef,
                exact=bool(given.exact),
                indexed_only=bool(given.indexed_only),
            )
        total = shard.info().points_count
        matches = total if flt is None else shard.count(qe.CountRequest(exact=False, filter=flt))
        return edge_search_params(self.store.planner.plan(matches, total, limit, self.store.index))


def visible(shard: qe.EdgeShard, ids: list[qe.PointId], access: qe.Filter) -> set[qe.PointId]:
    """Return which of ``ids`` pass the reader filter ``access`` (one filtered scroll)."""
    request = qe.ScrollRequest(
        limit=len(ids),
        filter=qe.Filter(must=[qe.HasIdCondition(set(ids)), access]),
        with_payload=False,
        with_vector=False,
    )
    records, _ = shard.scroll(request)
    return {r.id for r in records}


_SPARSE: Final = (models.SparseVector, models.Document)


def _composite(query: object) -> bool:
    """Whether a query needs the translator: fusion, a sparse vector, MMR."""
    if isinstance(query, models.NearestQuery):
        return query.mmr is not None or isinstance(query.nearest, _SPARSE)
    return isinstance(query, (models.FusionQuery, models.RrfQuery, *_SPARSE))


def refuse_part(value: object, part: str) -> None:
    if value is not None:
        raise ValueError(f"{part!r} is not supported by adrap's read-only Qdrant facade; drop it")


def bounded_page(limit: int | None, offset: int | None) -> tuple[int, int]:
    limit, offset = 10 if limit is None else limit, offset or 0
    if limit < 0 or offset < 0:
        raise ValueError(f"limit and offset must be >= 0, got limit={limit} offset={offset}")
    if limit + offset > MAX_POINTS:
        raise ValueError(
            f"limit + offset = {limit + offset} is over the {MAX_POINTS} points a request may ask "
            "for; page through the points (scroll with next_page_offset, or a smaller limit)"
        )
    return limit, offset


def _dense(query: object) -> list[float]:
    if isinstance(query, list) and all(isinstance(x, int | float) for x in query):
        return [float(x) for x in query]
    raise ValueError(
        f"query of type {type(query).__name__} is not supported by adrap's read-only Qdrant "
        "facade: send a dense vector, {'nearest': vector} or a point id"
    )
