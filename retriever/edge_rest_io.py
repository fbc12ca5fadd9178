"""Engine points as Qdrant REST replies, and REST payload/vector selectors as the engine's: part
of :mod:`retriever.edge_rest`."""

from __future__ import annotations

from typing import Any

import qdrant_edge as qe
from qdrant_client.http import models


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
