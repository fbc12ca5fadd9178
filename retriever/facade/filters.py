"""Qdrant REST filters (qdrant-client's models) translated into the embedded engine's filters.

For :mod:`retriever.facade.edge`: every condition Qdrant's REST API has (field match, range,
datetime range, geo, values count, is_empty, is_null, has_id, has_vector, nested, sub-filters,
min_should) except slices, which the engine lacks; and the reader filter every request gets
(:func:`access_filter`, :func:`restrict`).
"""

from __future__ import annotations

import uuid
from typing import Any

import qdrant_edge as qe
from qdrant_client.http import models

from retriever.edge_translate import access_conditions
from retriever.schema import META_POINT_ID, META_TREE, F


def point_id(value: int | str | uuid.UUID) -> qe.PointId:
    """Return a point id as the engine takes it; Qdrant ids are unsigned integers or UUIDs."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(
            f"Unable to parse point id {value!r}: an id is an unsigned integer or a UUID"
        ) from None


def edge_filter(flt: models.Filter | None) -> qe.Filter | None:
    """Translate a Qdrant REST filter into the engine's (``None`` stays ``None``: no filter).

    Raises:
        ValueError: a condition the engine lacks (slices), or an invalid point id.
    """
    if flt is None:
        return None
    min_should = None
    if flt.min_should is not None:
        conditions = _conditions(flt.min_should.conditions) or []
        min_should = qe.MinShould(conditions, flt.min_should.min_count)
    return qe.Filter(
        must=_conditions(flt.must),
        should=_conditions(flt.should),
        must_not=_conditions(flt.must_not),
        min_should=min_should,
    )


def access_filter(readable: tuple[str, ...] | None) -> qe.Filter | None:
    """Return the engine filter of the points a caller who may read ``readable`` may read.

    ``None``: an unrestricted caller, no filter. Otherwise a node whose every listed access class
    is readable (at least one listed: ``must: access any``, ``must_not: access except``, as
    :func:`retriever.edge_translate.edge_filter` says), or the reserved meta point, which names
    no class and is every client's to read (it says which model embeds the queries).
    """
    if readable is None:
        return None
    meta = qe.Filter(
        must=[
            qe.HasIdCondition({META_POINT_ID}),
            qe.FieldCondition(key=F.TREE, match=qe.MatchValue(META_TREE)),
        ]
    )
    if not readable:
        return qe.Filter(should=[meta])
    listed, outside = access_conditions(readable)
    nodes = qe.Filter(must=[listed], must_not=[outside])
    return qe.Filter(should=[nodes, meta])


def restrict(given: qe.Filter | None, access: qe.Filter | None) -> qe.Filter | None:
    """Return the client's filter ``given`` ANDed with the reader filter ``access``.

    The client's filter is kept whole as one condition of ``must``, never merged into its lists,
    so no ``should``, ``must_not`` or ``min_should`` of its own can loosen the reader filter.
    """
    if access is None:
        return given
    if given is None:
        return access
    return qe.Filter(must=[given, access])


def _conditions(given: Any) -> list[Any] | None:
    if given is None:
        return None
    return [_condition(c) for c in (given if isinstance(given, list) else [given])]


def _condition(c: models.Condition) -> Any:
    if isinstance(c, models.Filter):
        return edge_filter(c)
    if isinstance(c, models.FieldCondition):
        return _field(c)
    if isinstance(c, models.IsEmptyCondition):
        return qe.IsEmptyCondition(c.is_empty.key)
    if isinstance(c, models.IsNullCondition):
        return qe.IsNullCondition(c.is_null.key)
    if isinstance(c, models.HasIdCondition):
        return qe.HasIdCondition({point_id(i) for i in c.has_id})
    if isinstance(c, models.HasVectorCondition):
        return qe.HasVectorCondition(c.has_vector)
    if isinstance(c, models.NestedCondition):
        inner = edge_filter(c.nested.filter)
        return qe.NestedCondition(c.nested.key, inner if inner is not None else qe.Filter())
    raise ValueError(f"filter condition {type(c).__name__} is not supported by adrap's facade")


def _field(c: models.FieldCondition) -> qe.FieldCondition:
    rng: Any = None
    if isinstance(c.range, models.Range):
        rng = qe.RangeFloat(gte=c.range.gte, gt=c.range.gt, lte=c.range.lte, lt=c.range.lt)
    elif isinstance(c.range, models.DatetimeRange):
        r = c.range
        rng = qe.RangeDateTime(
            *(None if v is None else v.isoformat() for v in (r.gte, r.gt, r.lte, r.lt))
        )
    count = c.values_count
    return qe.FieldCondition(
        key=c.key,
        match=None if c.match is None else _match(c.match),
        range=rng,
        geo_bounding_box=None
        if c.geo_bounding_box is None
        else qe.GeoBoundingBox(
            _geo(c.geo_bounding_box.top_left), _geo(c.geo_bounding_box.bottom_right)
        ),
        geo_radius=None
        if c.geo_radius is None
        else qe.GeoRadius(_geo(c.geo_radius.center), c.geo_radius.radius),
        geo_polygon=None
        if c.geo_polygon is None
        else qe.GeoPolygon(
            [_geo(p) for p in c.geo_polygon.exterior.points],
            None
            if c.geo_polygon.interiors is None
            else [[_geo(p) for p in ring.points] for ring in c.geo_polygon.interiors],
        ),
        values_count=None
        if count is None
        else qe.ValuesCount(lt=count.lt, gt=count.gt, lte=count.lte, gte=count.gte),
        is_empty=c.is_empty,
        is_null=c.is_null,
    )


def _geo(p: models.GeoPoint) -> qe.GeoPoint:
    return qe.GeoPoint(p.lon, p.lat)


def _match(m: models.Match) -> Any:
    if isinstance(m, models.MatchValue):
        return qe.MatchValue(m.value)
    if isinstance(m, models.MatchAny):
        return qe.MatchAny(m.any)
    if isinstance(m, models.MatchExcept):
        return qe.MatchExcept(m.except_)
    if isinstance(m, models.MatchText):
        return qe.MatchText(m.text)
    if isinstance(m, models.MatchTextAny):
        return qe.MatchTextAny(m.text_any)
    if isinstance(m, models.MatchPhrase):
        return qe.MatchPhrase(m.phrase)
    if isinstance(m, models.MatchPrefix):
        return qe.MatchPrefix(m.prefix)
    if isinstance(m, models.MatchSubstring):
        return qe.MatchSubstring(m.substring)
    raise ValueError(f"match {type(m).__name__} is not supported by adrap's facade")
