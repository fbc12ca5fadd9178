"""The facade's input and output: the legacy search request, engine points as Qdrant REST
replies, and REST payload/vector selectors in the embedded engine's terms."""

from __future__ import annotations

from typing import Any

import qdrant_edge as qe
from pydantic import BaseModel, ConfigDict, Field
from qdrant_client.http import models


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


def out_id(value: qe.PointId) -> int | str:
    return value if isinstance(value, int) else str(value)


def scored(p: qe.ScoredPoint) -> models.ScoredPoint:
    return models.ScoredPoint(
        id=out_id(p.id),
        version=p.version,
        score=p.score,
        payload=p.payload,
        vector=vector_out(p.vector),
    )


def record(r: qe.Record) -> models.Record:
    return models.Record(id=out_id(r.id), payload=r.payload, vector=vector_out(r.vector))


def vector_out(vector: object) -> Any:
    """The engine's vectors as REST returns them: ``{"dense": [...], "bm25": {indices, values}}``."""
    if not isinstance(vector, dict):
        return vector
    return {
        name: models.SparseVector(indices=list(v.indices), values=list(v.values))
        if isinstance(v, qe.SparseVector)
        else v
        for name, v in vector.items()
    }


def with_payload(value: models.WithPayloadInterface | None, default: bool) -> Any:
    if value is None:
        return default
    if isinstance(value, models.PayloadSelectorInclude):
        return qe.PayloadSelector.Include(list(value.include))
    if isinstance(value, models.PayloadSelectorExclude):
        return qe.PayloadSelector.Exclude(list(value.exclude))
    return value if isinstance(value, bool) else list(value)


def with_vector(value: models.WithVector | None) -> Any:
    if value is None:
        return False
    return value if isinstance(value, bool) else list(value)
