"""Qdrant's REST read API over the embedded store: qdrant-client's REST models in, engine calls, models out.

Why: the embedded shard can be opened by one process only, so while ``adrap watch`` owns it no
Qdrant client could read the tree. The daemon therefore serves Qdrant's own read endpoints
(:mod:`ingestor.service.qdrant_rest`); this module does the translation, so it is tested on a real
shard without HTTP and the engine's types stay inside the retriever. Requests are qdrant-client's
REST models (``qdrant_client.http.models``) and replies are built from them too, so both stay
faithful to what real clients send and parse.

Supported: collection info; the Query API's nearest query (a vector, ``{"nearest": ...}`` or a
point id), no query (points by id), ``filter``, ``limit``, ``offset``, ``score_threshold``,
``with_payload``, ``with_vector``, ``params``; the legacy search; scroll; retrieve by ids; count.
Every filter condition Qdrant has but slices (:mod:`retriever.edge_rest_filter`). ``using`` may
be omitted: the collection has one vector, ``dense``. A query without ``params`` is planned as
adrap's own searches are (:mod:`retriever.plan`), so the same filter gives the same hits as
``adrap query``. Anything else (prefetch, fusion, recommend, documents for inference, order_by,
shard keys) raises ValueError naming the part, which the facade answers with 400.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

import qdrant_edge as qe
from pydantic import BaseModel, ConfigDict, Field
from qdrant_client.http import models

from retriever.edge_rest_filter import edge_filter, point_id
from retriever.edge_store import edge_search_params
from retriever.errors import StoreError
from retriever.plan import HnswConfig, Planner, StoreIndex
from retriever.schema import VECTOR_NAME, vector_names

_T = TypeVar("_T")

#: Most points one request may ask for (``limit + offset``, or ids); beyond, page.
MAX_POINTS: Final = 10_000


class ShardReader(Protocol):
    """What the reader needs of the store: :class:`~retriever.edge_store.EdgeNodeStore`."""

    dim: int | None
    planner: Planner
    hnsw: HnswConfig
    index: StoreIndex

    def read_shard(self, action: str, read: Callable[[qe.EdgeShard], _T]) -> _T: ...


class NamedVectorIn(BaseModel):
    """``{"name": "dense", "vector": [...]}`` in a legacy search request."""

    model_config = ConfigDict(extra="forbid")
    name: str
    vector: list[float]


class RestSearchRequest(BaseModel):
    """The body of ``POST /collections/{name}/points/search`` (Qdrant's legacy search).

    qdrant-client 1.16+ no longer ships this model (its ``search`` became ``query_points``), but
    servers and the JS client still speak it; the parts are qdrant-client's own models.
    """

    model_config = ConfigDict(extra="forbid")
    vector: list[float] | NamedVectorIn
    filter: models.Filter | None = None
    params: models.SearchParams | None = None
    limit: int = Field(ge=0)
    offset: int | None = Field(default=None, ge=0)
    with_payload: models.WithPayloadInterface | None = None
    with_vector: models.WithVector | None = None
    score_threshold: float | None = None
    shard_key: models.ShardKeySelector | None = None


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

    def info(self) -> models.CollectionInfo:
        """Return the collection's statistics and configuration as Qdrant describes its own."""
        shard_info = self.store.read_shard("read the store's info", lambda s: s.info())
        hnsw, dim = self.store.hnsw, self.store.dim or 0
        schema = {
            key: models.PayloadIndexInfo(
                data_type=models.PayloadSchemaType(str(index.data_type).rsplit(".", 1)[-1].lower()),
                points=index.points,
            )
            for key, index in shard_info.payload_schema.items()
        }
        config = models.CollectionConfig(
            params=models.CollectionParams(
                vectors={
                    name: models.VectorParams(size=dim, distance=models.Distance.COSINE)
                    for name in self._vector_names()
                }
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
            indexed_vectors_count=shard_info.indexed_vectors_count,
            points_count=shard_info.points_count,
            segments_count=shard_info.segments_count,
            config=config,
            payload_schema=schema,
        )

    def query(self, req: models.QueryRequest) -> models.QueryResponse:
        """Run a Query API request (``POST /collections/{name}/points/query``).

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
        """
        _refuse(req.prefetch, "prefetch")
        _refuse(req.lookup_from, "lookup_from")
        _refuse(req.shard_key, "shard_key")
        limit, offset = _bounded(req.limit, req.offset)
        flt = edge_filter(req.filter)
        payload, vector = _with_payload(req.with_payload, False), _with_vector(req.with_vector)
        query = req.query
        if isinstance(query, models.NearestQuery):
            _refuse(query.mmr, "nearest.mmr")
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
            return models.QueryResponse(points=[_scored(p) for p in hits])
        if isinstance(query, int | str | uuid.UUID):
            by_id = point_id(query)
            dense = self._vector_of(by_id)
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
        return models.QueryResponse(points=[_scored(p) for p in hits])

    def search(self, req: RestSearchRequest) -> list[models.ScoredPoint]:
        """Run a legacy search (``POST /collections/{name}/points/search``).

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
        """
        _refuse(req.shard_key, "shard_key")
        limit, offset = _bounded(req.limit, req.offset)
        using, vec = (
            (req.vector.name, req.vector.vector)
            if isinstance(req.vector, NamedVectorIn)
            else (None, req.vector)
        )
        hits = self._nearest(
            vec,
            using,
            edge_filter(req.filter),
            limit,
            offset,
            req.params,
            _with_payload(req.with_payload, False),
            _with_vector(req.with_vector),
            req.score_threshold,
        )
        return [_scored(p) for p in hits]

    def scroll(self, req: models.ScrollRequest) -> models.ScrollResult:
        """Return one page of points in id order (``POST /collections/{name}/points/scroll``).

        Raises:
            ValueError: an unsupported or invalid part of the request (named).
        """
        _refuse(req.shard_key, "shard_key")
        _refuse(req.order_by, "order_by")
        limit, _ = _bounded(req.limit, None)
        request = qe.ScrollRequest(
            offset=None if req.offset is None else point_id(req.offset),
            limit=limit,
            filter=edge_filter(req.filter),
            with_payload=_with_payload(req.with_payload, True),
            with_vector=_with_vector(req.with_vector),
        )
        records, after = self.store.read_shard("scroll points", lambda s: s.scroll(request))
        return models.ScrollResult(
            points=[_record(r) for r in records],
            next_page_offset=None if after is None else _out_id(after),
        )

    def retrieve(self, req: models.PointRequest) -> list[models.Record]:
        """Return the points with these ids that exist (``POST /collections/{name}/points``).

        Raises:
            ValueError: an id is neither an unsigned integer nor a UUID, or too many ids.
        """
        _refuse(req.shard_key, "shard_key")
        if len(req.ids) > MAX_POINTS:
            raise ValueError(f"{len(req.ids)} ids is over the {MAX_POINTS} a request may ask for")
        ids = list(dict.fromkeys(point_id(i) for i in req.ids))
        payload, vector = _with_payload(req.with_payload, True), _with_vector(req.with_vector)
        records = self.store.read_shard(
            f"retrieve {len(ids)} points", lambda s: s.retrieve(ids, payload, vector)
        )
        return [_record(r) for r in records]

    def count(self, req: models.CountRequest) -> models.CountResult:
        """Count the points matching the filter (``POST /collections/{name}/points/count``)."""
        _refuse(req.shard_key, "shard_key")
        request = qe.CountRequest(exact=req.exact is not False, filter=edge_filter(req.filter))
        return models.CountResult(count=self.store.read_shard("count", lambda s: s.count(request)))

    def _vector_names(self) -> tuple[str, ...]:
        return vector_names(leaf_vector=self.store.index.leaf_vector)

    def _vector_of(self, point: qe.PointId) -> list[float]:
        records = self.store.read_shard(
            "retrieve the query point", lambda s: s.retrieve([point], False, [VECTOR_NAME])
        )
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
        if using is not None and using not in self._vector_names():
            raise ValueError(
                f"Wrong input: Not existing vector name error: {using} "
                f"(adrap's collection has {', '.join(map(repr, self._vector_names()))})"
            )
        if self.store.dim is not None and len(vector) != self.store.dim:
            raise ValueError(
                f"Wrong input: Vector dimension error: expected dim: {self.store.dim}, got "
                f"{len(vector)} (embed the query with the model named in the meta point)"
            )
        query = qe.Query.Nearest([float(x) for x in vector], using=using or VECTOR_NAME)

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


def _refuse(value: object, part: str) -> None:
    if value is not None:
        raise ValueError(f"{part!r} is not supported by adrap's read-only Qdrant facade; drop it")


def _bounded(limit: int | None, offset: int | None) -> tuple[int, int]:
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


def _out_id(value: qe.PointId) -> int | str:
    return value if isinstance(value, int) else str(value)


def _scored(p: qe.ScoredPoint) -> models.ScoredPoint:
    return models.ScoredPoint(
        id=_out_id(p.id),
        version=p.version,
        score=p.score,
        payload=p.payload,
        vector=_vector_out(p.vector),
    )


def _record(r: qe.Record) -> models.Record:
    return models.Record(id=_out_id(r.id), payload=r.payload, vector=_vector_out(r.vector))


def _vector_out(vector: object) -> Any:
    """The engine's vectors as REST returns them: ``{"dense": [...]}`` (dense only here)."""
    return vector


def _with_payload(value: models.WithPayloadInterface | None, default: bool) -> Any:
    if value is None:
        return default
    if isinstance(value, models.PayloadSelectorInclude):
        return qe.PayloadSelector.Include(list(value.include))
    if isinstance(value, models.PayloadSelectorExclude):
        return qe.PayloadSelector.Exclude(list(value.exclude))
    return value if isinstance(value, bool) else list(value)


def _with_vector(value: models.WithVector | None) -> Any:
    if value is None:
        return False
    return value if isinstance(value, bool) else list(value)
