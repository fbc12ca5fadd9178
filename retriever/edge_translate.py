"""Our types in the embedded engine's terms: a SearchFilter as a qdrant-edge filter, a plan as
search parameters, a node as a point payload (for :mod:`retriever.edge_store`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import qdrant_edge as qe

from retriever.plan import SearchPlan, StoreIndex
from retriever.schema import (
    META_TREE,
    SPARSE_VECTOR,
    F,
    NodePayload,
    SearchFilter,
    point_vectors,
    vector_layers,
)
from retriever.sparse import SAMPLE_POINTS, Fusion, TermSample, bm25_documents
from retriever.validation import check_ids


def edge_search_params(plan: SearchPlan) -> qe.SearchParams:
    """Return the engine's search parameters for ``plan`` (rescoring when it oversamples)."""
    rescore = (
        None
        if plan.oversampling is None
        else qe.QuantizationSearchParams(rescore=True, oversampling=plan.oversampling)
    )
    return qe.SearchParams(hnsw_ef=plan.hnsw_ef, exact=plan.exact, quantization=rescore)


def layer_condition(low: int | None, high: int | None) -> qe.FieldCondition:
    """Return the condition ``low <= layer <= high`` (None: no bound)."""
    bounds = qe.RangeFloat(
        gte=None if low is None else float(low), lte=None if high is None else float(high)
    )
    return qe.FieldCondition(key=F.LAYER, range=bounds)


def graph_filter(name: str) -> qe.Filter | None:
    """Return the filter of the points that carry vector ``name`` (None: every point)."""
    layers = vector_layers(name)
    return None if layers is None else qe.Filter(must=[layer_condition(*layers)])


def edge_filter(flt: SearchFilter) -> qe.Filter | None:
    """Translate a SearchFilter; ``None`` means "matches nothing" (an empty ``ids``)."""
    if flt.tree == META_TREE:
        raise ValueError(f"tree {META_TREE!r} is reserved for the meta point")
    must: list[Any] = [qe.FieldCondition(key=F.TREE, match=qe.MatchValue(flt.tree))]
    if flt.min_layer is not None or flt.max_layer is not None:
        must.append(layer_condition(flt.min_layer, flt.max_layer))
    source = flt.source_condition()
    if source is not None:
        must.append(qe.FieldCondition(key=source[0], match=qe.MatchValue(source[1])))
    if flt.kind is not None:
        must.append(qe.FieldCondition(key=F.KIND, match=qe.MatchValue(flt.kind.value)))
    if flt.ids is not None:
        ids = check_ids(flt.ids)
        if not ids:
            return None
        must.append(qe.HasIdCondition(set(ids)))
    if flt.readable is not None:
        if not flt.readable:
            return None
        listed, outside = access_conditions(flt.readable)
        must.append(listed)
        return qe.Filter(must=must, must_not=[outside])
    return qe.Filter(must=must)


def access_conditions(readable: Sequence[str]) -> tuple[qe.FieldCondition, qe.FieldCondition]:
    """The reader filter's two conditions: ``must`` list at least one class of ``readable`` (a
    node without classes is the owner's alone), ``must_not`` list one outside it."""
    classes = list(readable)
    return (
        qe.FieldCondition(key=F.ACCESS, match=qe.MatchAny(classes)),
        qe.FieldCondition(key=F.ACCESS, match=qe.MatchExcept(classes)),
    )


def edge_points(
    nodes: Sequence[NodePayload], rows: list[list[float]], index: StoreIndex
) -> list[qe.Point]:
    """Return the nodes as points: the dense vector (again under its layer's own name), the
    text's BM25 vector in a store that has one, and the payload."""
    vectors = [
        point_vectors(
            n.layer, row, leaf_vector=index.leaf_vector, summary_vector=index.summary_vector
        )
        for n, row in zip(nodes, rows, strict=True)
    ]
    if index.sparse:
        for named, sparse in zip(vectors, bm25_documents([n.text for n in nodes]), strict=True):
            named[SPARSE_VECTOR] = sparse
    return [qe.Point(n.node_id, v, edge_payload(n)) for n, v in zip(nodes, vectors, strict=True)]


def edge_payload(node: NodePayload) -> dict[str, Any]:
    """The node's payload with its lists as tuples: qdrant-edge converts a tuple of strings about
    1.7x faster than a list (measured: 6.5 vs 11.2 ms for 1,500 sources), and a summary high in a
    big tree lists hundreds of sources. The stored payload is the same."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in node.to_payload().items()}


def edge_fusion(fusion: Fusion) -> Any:
    """Return the engine's fusion query for ``fusion`` (its stub types the query as ``Fusion``,
    the engine takes ``Fusion.Rrf`` / ``Fusion.Dbsf``)."""
    if fusion.method == "dbsf":
        return qe.Fusion.Dbsf()
    weights = None if fusion.weights is None else list(fusion.weights)
    return qe.Fusion.Rrf(k=fusion.k, weights=weights)


def edge_query_request(
    dense: list[float],
    using: str,
    flt: qe.Filter,
    limit: int,
    params: qe.SearchParams,
    *,
    with_payload: bool,
    sparse: qe.SparseVector | None = None,
    fusion: Fusion | None = None,
    prefetch_limit: int | None = None,
    sparse_limit: int | None = None,
    dense_ids: qe.HasIdCondition | None = None,
) -> qe.QueryRequest:
    """Return a nearest query on ``using``, or with ``sparse`` a hybrid one: a dense prefetch of
    ``prefetch_limit`` hits (default ``limit``; of ``dense_ids`` only where given, the best dense
    hits found already) and a BM25 prefetch of ``sparse_limit`` (default: as many), both
    filtered by ``flt``, fused by ``fusion`` into the best ``limit``."""
    if sparse is None:
        return qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(dense, using=using),
            filter=flt,
            with_payload=with_payload,
            with_vector=False,
            params=params,
        )
    depth = max(limit, prefetch_limit or 0)
    prefetches = [
        qe.Prefetch(
            limit=depth,
            query=qe.Query.Nearest(dense, using=using),
            filter=flt if dense_ids is None else qe.Filter(must=[flt, dense_ids]),
            params=params,
        ),
        qe.Prefetch(
            limit=sparse_limit or depth,
            query=qe.Query.Nearest(sparse, using=SPARSE_VECTOR),
            filter=flt,
        ),
    ]
    return qe.QueryRequest(
        limit=limit,
        query=edge_fusion(fusion or Fusion()),
        prefetches=prefetches,
        filter=flt,
        with_payload=with_payload,
        with_vector=False,
    )


def edge_term_sample(shard: qe.EdgeShard) -> TermSample:
    """Return the :class:`~retriever.sparse.TermSample` of ``shard``: the BM25 vectors of its
    first :data:`~retriever.sparse.SAMPLE_POINTS` points in id order (uuid5 hashes: an even
    spread over the store's trees and files), as a server store reads its own."""
    request = qe.ScrollRequest(limit=SAMPLE_POINTS, with_payload=False, with_vector=[SPARSE_VECTOR])
    records, _ = shard.scroll(request)
    points = shard.count(qe.CountRequest(exact=False)) - 1  # less the meta point
    named = (r.vector for r in records if isinstance(r.vector, dict))
    vectors = (v.get(SPARSE_VECTOR) for v in named)
    return TermSample.of((v.indices for v in vectors if isinstance(v, qe.SparseVector)), points)
