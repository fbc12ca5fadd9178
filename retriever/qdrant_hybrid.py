"""BM25 vectors and hybrid queries in qdrant-client's terms (for :mod:`retriever.qdrant_store`).

The sparse vectors are the embedded engine's BM25 (:mod:`retriever.sparse`), computed here, so a
server needs no inference service and its points are the embedded store's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from qdrant_client import QdrantClient, models

from retriever.plan import StoreIndex
from retriever.schema import SPARSE_VECTOR, F, NodePayload, point_vectors
from retriever.sparse import (
    SAMPLE_POINTS,
    Fusion,
    TermSample,
    bm25_documents,
    reindex_sparse,
)

#: The sparse vector every new collection gets: BM25 term weights, IDF applied by the server, its
#: inverted index in mapped files rather than RAM (as the embedded store's: 0.6-1.25 KB a point).
SPARSE_PARAMS = models.SparseVectorParams(
    index=models.SparseIndexParams(on_disk=True), modifier=models.Modifier.IDF
)


def sparse_vector(indices: Sequence[int], values: Sequence[float]) -> models.SparseVector:
    """Return a sparse vector as qdrant-client sends it."""
    return models.SparseVector(indices=list(indices), values=list(values))


def qdrant_points(
    nodes: Sequence[NodePayload], rows: list[list[float]], index: StoreIndex
) -> list[models.PointStruct]:
    """Return the nodes as points: the dense vector (again under its layer's own name), the
    text's BM25 vector in a collection that has one, and the payload."""
    vectors: list[dict[str, Any]] = [
        point_vectors(
            n.layer, row, leaf_vector=index.leaf_vector, summary_vector=index.summary_vector
        )
        for n, row in zip(nodes, rows, strict=True)
    ]
    if index.sparse:
        for named, v in zip(vectors, bm25_documents([n.text for n in nodes]), strict=True):
            named[SPARSE_VECTOR] = sparse_vector(v.indices, v.values)
    return [
        models.PointStruct(id=n.node_id, vector=v, payload=n.to_payload())
        for n, v in zip(nodes, vectors, strict=True)
    ]


def fusion_query(fusion: Fusion) -> models.RrfQuery | models.FusionQuery:
    """Return the Query API's fusion for ``fusion``."""
    if fusion.method == "dbsf":
        return models.FusionQuery(fusion=models.Fusion.DBSF)
    weights = None if fusion.weights is None else list(fusion.weights)
    return models.RrfQuery(rrf=models.Rrf(k=fusion.k, weights=weights))


def hybrid_prefetch(
    dense: list[float],
    using: str,
    sparse: Any,
    query_filter: models.Filter,
    params: models.SearchParams | None,
    depths: tuple[int, int],
) -> list[models.Prefetch]:
    """Return the dense and BM25 prefetches of a hybrid query (``sparse``: the query's BM25
    vector, :func:`~retriever.sparse.bounded_query`), ``depths`` hits (dense, BM25)."""
    return [
        models.Prefetch(
            query=dense, using=using, filter=query_filter, params=params, limit=depths[0]
        ),
        models.Prefetch(
            query=sparse_vector(sparse.indices, sparse.values),
            using=SPARSE_VECTOR,
            filter=query_filter,
            limit=depths[1],
        ),
    ]


def sample_terms(client: QdrantClient, collection: str, call: Callable[[str], Any]) -> TermSample:
    """Return the :class:`~retriever.sparse.TermSample` of ``collection``: the BM25 vectors of
    its first :data:`~retriever.sparse.SAMPLE_POINTS` points in id order (uuid5 hashes: an even
    spread), as the embedded store reads its own."""
    with call("sample the BM25 vectors"):
        records, _ = client.scroll(
            collection, limit=SAMPLE_POINTS, with_payload=False, with_vectors=[SPARSE_VECTOR]
        )
        points = client.count(collection, exact=False).count - 1  # less the meta point
    named = (r.vector for r in records if isinstance(r.vector, dict))
    vectors = (v.get(SPARSE_VECTOR) for v in named)
    return TermSample.of((v.indices for v in vectors if isinstance(v, models.SparseVector)), points)


def index_sparse_points(
    client: QdrantClient, collection: str, physical: str, call: Callable[[str], Any]
) -> int:
    """Add the BM25 vector to the collection ``physical`` (behind ``collection``) and give every
    point its text's vector; return how many points got one. ``call(action)`` is the adapter's
    error translation (a context manager)."""
    with call("add the BM25 sparse vector"):
        client.create_vector_name(
            physical,
            SPARSE_VECTOR,
            models.SparseVectorNameConfig(
                sparse=models.SparseVectorConfig(modifier=models.Modifier.IDF)
            ),
        )

    def page(offset: Any) -> tuple[list[tuple[Any, str]], Any]:
        with call("scroll the points"):
            records, after = client.scroll(
                collection, limit=1024, offset=offset, with_payload=[F.TEXT], with_vectors=False
            )
        return [(r.id, r.payload[F.TEXT]) for r in records if r.payload], after

    def write(rows: list[tuple[Any, str]]) -> None:
        sparse = bm25_documents([text for _, text in rows])
        points = [
            models.PointVectors(id=pid, vector={SPARSE_VECTOR: sparse_vector(v.indices, v.values)})
            for (pid, _), v in zip(rows, sparse, strict=True)
        ]
        with call("write BM25 vectors"):
            client.update_vectors(collection, points=points, wait=True)

    return reindex_sparse(page, write)
