"""Our types in Qdrant's terms: a SearchFilter as a server filter, a plan as search parameters
(for :mod:`retriever.qdrant_store`; the embedded engine's are in :mod:`retriever.edge_translate`)."""

from __future__ import annotations

from collections.abc import Sequence

from qdrant_client import models

from retriever.plan import SearchPlan
from retriever.schema import META_TREE, F, SearchFilter, vector_layers
from retriever.validation import check_ids


def search_params(plan: SearchPlan) -> models.SearchParams:
    """Return the server's search parameters for ``plan`` (rescoring when it oversamples)."""
    rescore = (
        None
        if plan.oversampling is None
        else models.QuantizationSearchParams(rescore=True, oversampling=plan.oversampling)
    )
    return models.SearchParams(hnsw_ef=plan.hnsw_ef, exact=plan.exact, quantization=rescore)


def layer_condition(low: int | None, high: int | None) -> models.FieldCondition:
    """Return the condition ``low <= layer <= high`` (None: no bound)."""
    return models.FieldCondition(key=F.LAYER, range=models.Range(gte=low, lte=high))


def graph_filter(name: str) -> models.Filter | None:
    """Return the filter of the points that carry vector ``name`` (None: every point)."""
    layers = vector_layers(name)
    return None if layers is None else models.Filter(must=[layer_condition(*layers)])


def qdrant_filter(flt: SearchFilter) -> models.Filter | None:
    """Translate a SearchFilter; ``None`` means "matches nothing" (an empty ``ids``)."""
    if flt.tree == META_TREE:
        raise ValueError(f"tree {META_TREE!r} is reserved for the meta point")
    must: list[models.Condition] = [
        models.FieldCondition(key=F.TREE, match=models.MatchValue(value=flt.tree))
    ]
    if flt.min_layer is not None or flt.max_layer is not None:
        must.append(layer_condition(flt.min_layer, flt.max_layer))
    source = flt.source_condition()
    if source is not None:
        must.append(models.FieldCondition(key=source[0], match=models.MatchValue(value=source[1])))
    if flt.kind is not None:
        must.append(
            models.FieldCondition(key=F.KIND, match=models.MatchValue(value=flt.kind.value))
        )
    if flt.ids is not None:
        ids: list[models.ExtendedPointId] = list(check_ids(flt.ids))
        if not ids:
            return None
        must.append(models.HasIdCondition(has_id=ids))
    if flt.readable is not None:
        if not flt.readable:
            return None
        listed, outside = access_conditions(flt.readable)
        must.append(listed)
        return models.Filter(must=must, must_not=[outside])
    return models.Filter(must=must)


def access_conditions(
    readable: Sequence[str],
) -> tuple[models.FieldCondition, models.FieldCondition]:
    """As :func:`retriever.edge_translate.access_conditions`, in qdrant-client's models: ``must``
    list a class of ``readable``, ``must_not`` list one outside it."""
    classes = list(readable)
    return (
        models.FieldCondition(key=F.ACCESS, match=models.MatchAny(any=classes)),
        models.FieldCondition(key=F.ACCESS, match=models.MatchExcept(**{"except": classes})),
    )
