"""Embedded node store: Qdrant's engine in-process (qdrant-edge), on disk under the state dir.

One edge shard is one collection. The folder is locked by the process that opens it (a second
opener, even in the same process, fails), so one adrap process owns an embedded store; others
query through it (daemon ``/query``) or use server mode (``ADRAP_QDRANT__URL``).

Indexing: qdrant-edge runs no background optimizer. Upserts land in a plain (brute-force)
appendable segment and stay there until :meth:`EdgeNodeStore.optimize` runs the segment optimizers,
which build the HNSW graph once a segment exceeds the engine's indexing threshold (10 MB of
vectors, about 6.7k points at 384-d); below it ``optimize()`` returns at once (~50 us). An optimize
that finds work also merges segments, i.e. rebuilds the graph of the whole store (measured on
2 busy cores: ~2 s per 10k, 45-300 s per 100k 384-d points), and it holds the GIL throughout:
other Python threads of the process stall meanwhile. ``upsert`` therefore optimizes only once
``auto_optimize_points`` points are unindexed (plain search over 20k points costs ~1-2 ms);
a writer calls ``optimize()`` once after a full build.

Payloads: the engine parses a point's whole payload to return any of it (~10-25 us per hit), so
:meth:`EdgeNodeStore.search_budget` reads payloads only for the hits the token fill can use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import numpy as np
import qdrant_edge as qe
from numpy.typing import NDArray

from retriever.errors import RetrieverError, SchemaMismatchError, StoreError
from retriever.schema import (
    META_POINT_ID,
    META_TREE,
    PAYLOAD_INDEXES,
    TENANT_FIELD,
    VECTOR_NAME,
    F,
    IndexType,
    MetaPayload,
    NodePayload,
    ScoredNode,
    SearchFilter,
    check_meta,
)
from retriever.validation import (
    check_ids,
    check_node,
    check_query,
    check_vectors,
    ordered_payloads,
    ordered_vectors,
)

log = logging.getLogger(__name__)

#: Points per engine update call.
UPSERT_BATCH: Final = 256
#: Points per scroll page in :meth:`EdgeNodeStore.iter_ids`.
SCROLL_PAGE: Final = 1024
#: First batch of payloads :meth:`EdgeNodeStore.search_budget` reads (~2000 tokens of nodes).
BUDGET_BATCH: Final = 16
#: ``upsert`` runs the optimizers once this many points are not in an HNSW index.
AUTO_OPTIMIZE_POINTS: Final = 20_000


class EdgeNodeStore:
    """A :class:`~retriever.protocols.NodeStore` on an embedded qdrant-edge shard in ``path``.

    The shard is loaded (and its folder locked) at construction if ``path`` holds one; otherwise
    :meth:`ensure_collection` creates it. Use as a context manager or call :meth:`close`.

    Args:
        path: The shard folder (created if missing).
        auto_optimize_points: Unindexed points that make ``upsert`` build the HNSW index before
            returning; ``None`` leaves indexing to explicit :meth:`optimize` calls.
        hnsw_ef: HNSW search breadth (``None``: the engine's default, ``ef_construct``).

    Raises:
        StoreError: the folder is locked by another process or is not a readable shard.
    """

    def __init__(
        self,
        path: Path,
        *,
        auto_optimize_points: int | None = AUTO_OPTIMIZE_POINTS,
        hnsw_ef: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.auto_optimize_points = auto_optimize_points
        self.hnsw_ef = hnsw_ef
        self.dim: int | None = None
        self._shard: qe.EdgeShard | None = None
        self._closed = False
        if self.path.is_dir() and any(self.path.iterdir()):
            with self._engine("open the store"):
                self._shard = qe.EdgeShard.load(str(self.path))
            try:
                meta = self._read_meta()
            except BaseException:
                self.close()  # release the folder lock: the caller never gets this object
                raise
            if meta is not None and isinstance(meta.get(F.EMBED_DIM), int):
                self.dim = meta[F.EMBED_DIM]
            log.debug("opened embedded store %s (dim=%s)", self.path, self.dim)

    # -- lifecycle -------------------------------------------------------------------------------

    def ensure_collection(self, dim: int, embed_model: str) -> None:
        """Create the shard, its payload indexes and meta point if missing; validate otherwise.

        Raises:
            SchemaMismatchError: the store was built with another embedding model or dimension.
            StoreError: the engine failed.
        """
        if dim < 1:
            raise ValueError(f"vector dimension must be >= 1, got {dim}")
        if self._closed:
            raise StoreError(f"embedded store {self.path} is closed")
        if self._shard is None:
            config = qe.EdgeConfig(
                vectors={VECTOR_NAME: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)}
            )
            with self._engine("create the store"):
                self._shard = qe.EdgeShard.create(str(self.path), config)
            log.info("created embedded store %s (%d-d, %s)", self.path, dim, embed_model)
        shard = self._shard
        meta = self._read_meta()
        check_meta(meta, embed_model=embed_model, dim=dim, where=f"embedded store {self.path}")
        self._check_vector_dim(shard, dim, embed_model)
        with self._engine("create payload indexes"):
            existing = set(shard.info().payload_schema)
            for field, kind in PAYLOAD_INDEXES.items():
                if field not in existing:
                    shard.update(
                        qe.UpdateOperation.create_field_index(field, _index_schema(field, kind))
                    )
        if meta is None:
            e0 = [1.0] + [0.0] * (dim - 1)
            payload = MetaPayload(embed_model=embed_model, embed_dim=dim).to_payload()
            with self._engine("write the meta point"):
                shard.update(
                    qe.UpdateOperation.upsert_points(
                        [qe.Point(META_POINT_ID, {VECTOR_NAME: e0}, payload)]
                    )
                )
                shard.flush()
        self.dim = dim

    def optimize(self) -> bool:
        """Run the engine's segment optimizers (build the HNSW index), blocking until done.

        Returns:
            True if any segment was rebuilt, False if the store was already optimal.
        """
        shard = self._require()
        start = time.perf_counter()
        with self._engine("optimize (build the HNSW index)"):
            changed = shard.optimize()
            info = shard.info()
        if changed:
            log.info(
                "optimized embedded store %s: %d points, %d indexed, %d segments in %.1f s",
                self.path,
                info.points_count,
                info.indexed_vectors_count,
                info.segments_count,
                time.perf_counter() - start,
            )
        return changed

    def close(self) -> None:
        """Flush to disk and release the folder lock (idempotent)."""
        shard, self._shard = self._shard, None
        self._closed = True
        if shard is not None:
            with self._engine("close the store"):
                shard.flush()
                shard.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writes ----------------------------------------------------------------------------------

    def upsert(self, nodes: Sequence[NodePayload], vectors: NDArray[np.float32]) -> None:
        """Write nodes (idempotent: point id = node_id), ``vectors`` of shape ``(len(nodes), dim)``.

        Raises:
            ValueError: shapes, ids or vectors are invalid.
            StoreError: the engine failed.
        """
        arr = check_vectors(nodes, vectors, self.dim)
        for node in nodes:
            check_node(node)
        if not nodes:
            return
        shard = self._require()
        with self._engine(f"upsert {len(nodes)} points"):
            for start in range(0, len(nodes), UPSERT_BATCH):
                batch = nodes[start : start + UPSERT_BATCH]
                rows = arr[start : start + UPSERT_BATCH].tolist()
                points = [
                    qe.Point(node.node_id, {VECTOR_NAME: row}, node.to_payload())
                    for node, row in zip(batch, rows, strict=True)
                ]
                shard.update(qe.UpdateOperation.upsert_points(points))
            info = shard.info()
        unindexed = info.points_count - info.indexed_vectors_count
        if self.auto_optimize_points is not None and unindexed >= self.auto_optimize_points:
            self.optimize()

    def delete(self, node_ids: Sequence[str]) -> None:
        """Delete points by node id; unknown ids are ignored (the meta point is never deleted)."""
        ids = [i for i in check_ids(node_ids) if i != META_POINT_ID]
        if not ids:
            return
        shard = self._require()
        with self._engine(f"delete {len(ids)} points"):
            for start in range(0, len(ids), SCROLL_PAGE):
                page: list[qe.PointId] = list(ids[start : start + SCROLL_PAGE])
                shard.update(qe.UpdateOperation.delete_points(page))

    # -- reads -----------------------------------------------------------------------------------

    def search(
        self, vector: NDArray[np.float32], flt: SearchFilter, limit: int
    ) -> list[ScoredNode]:
        """Return up to ``limit`` nodes matching ``flt``, best cosine score first.

        Raises:
            ValueError: ``flt.tree`` is the reserved meta tree, or the vector/limit is invalid.
            StoreError: the engine failed.
        """
        hits = self._query(vector, flt, limit, with_payload=True)
        return [ScoredNode(NodePayload.from_payload(h.payload), float(h.score)) for h in hits]

    def search_budget(
        self, vector: NDArray[np.float32], flt: SearchFilter, limit: int, max_tokens: int
    ) -> list[ScoredNode]:
        """Return ``fill_budget(search(vector, flt, limit), max_tokens)``, reading fewer payloads.

        The same single ANN query, without payloads; then the payloads of the best hits are
        fetched in growing batches (16, 32, ...) while the greedy fill (hits in score order while
        the running ``n_tokens`` total stays <= ``max_tokens``, stopping at the first that does
        not fit) still takes nodes. The engine parses a point's whole payload even to return one
        field, so a 100-hit search spends most of its time on payloads the fill never uses.

        Raises:
            ValueError: as :meth:`search`, or ``max_tokens < 1``.
            StoreError: the engine failed.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        hits = [(str(h.id), float(h.score)) for h in self._query(vector, flt, limit)]
        kept: list[ScoredNode] = []
        total, start, size = 0, 0, BUDGET_BATCH
        while start < len(hits):
            batch = hits[start : start + size]
            found = self._records([i for i, _ in batch], with_payload=True)
            for node_id, score in batch:
                if node_id not in found:
                    continue  # deleted since the query: as if the search had run after
                node = NodePayload.from_payload(found[node_id].payload)
                if total + node.n_tokens > max_tokens:
                    return kept
                total += node.n_tokens
                kept.append(ScoredNode(node, score))
            start, size = start + size, size * 2
        return kept

    def retrieve(self, node_ids: Sequence[str]) -> list[NodePayload]:
        """Return the nodes with these ids that exist, in the given order."""
        return ordered_payloads(self._records(node_ids, with_payload=True), node_ids)

    def retrieve_vectors(self, node_ids: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` array of the stored (L2-normalised) vectors of these ids.

        Raises:
            StoreError: some ids have no point (named in the message).
        """
        ids = check_ids(node_ids)
        return ordered_vectors(
            self._records(ids, with_payload=False), ids, self.dim, f"embedded store {self.path}"
        )

    def iter_ids(self, tree: str) -> Iterator[str]:
        """Yield the node id of every point of ``tree`` (scrolled in pages).

        Raises:
            ValueError: ``tree`` is the reserved meta tree (raised at the call, not on iteration).
        """
        return self._scroll(self._require(), _edge_filter(SearchFilter(tree=tree)), tree)

    def _scroll(
        self, shard: qe.EdgeShard, edge_filter: qe.Filter | None, tree: str
    ) -> Iterator[str]:
        offset: Any = None
        while True:
            request = qe.ScrollRequest(
                offset=offset,
                limit=SCROLL_PAGE,
                filter=edge_filter,
                with_payload=False,
                with_vector=False,
            )
            with self._engine(f"scroll tree {tree!r}"):
                records, offset = shard.scroll(request)
            yield from (str(r.id) for r in records)
            if offset is None:
                return

    def count(self, flt: SearchFilter) -> int:
        """Return the exact number of points matching ``flt``."""
        edge_filter = _edge_filter(flt)
        if edge_filter is None:
            return 0
        shard = self._require()
        with self._engine("count"):
            return shard.count(qe.CountRequest(exact=True, filter=edge_filter))

    # -- internals -------------------------------------------------------------------------------

    def _query(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        limit: int,
        *,
        with_payload: bool = False,
    ) -> list[qe.ScoredPoint]:
        query = check_query(vector, self.dim)
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        edge_filter = _edge_filter(flt)
        if edge_filter is None or limit == 0:
            return []
        shard = self._require()
        params = qe.SearchParams(hnsw_ef=self.hnsw_ef) if self.hnsw_ef is not None else None
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(query, using=VECTOR_NAME),
            filter=edge_filter,
            with_payload=with_payload,
            with_vector=False,
            params=params,
        )
        with self._engine("search"):
            return shard.query(request)

    def _require(self) -> qe.EdgeShard:
        if self._shard is None:
            if self._closed:
                raise StoreError(f"embedded store {self.path} is closed")
            raise StoreError(
                f"no adrap store in {self.path} yet; build one first (`adrap build PATH`)"
            )
        return self._shard

    def _read_meta(self) -> dict[str, Any] | None:
        shard = self._require()
        with self._engine("read the meta point"):
            records = shard.retrieve([META_POINT_ID], True, False)
        return dict(records[0].payload or {}) if records else None

    def _records(self, node_ids: Sequence[str], *, with_payload: bool) -> dict[str, qe.Record]:
        ids: list[qe.PointId] = list(
            dict.fromkeys(i for i in check_ids(node_ids) if i != META_POINT_ID)
        )
        if not ids:
            return {}
        shard = self._require()
        with_vector: list[str] | bool = False if with_payload else [VECTOR_NAME]
        with self._engine(f"retrieve {len(ids)} points"):
            # The stub marks both flags optional but the engine requires them positionally.
            records = shard.retrieve(ids, with_payload, with_vector)
        return {str(r.id): r for r in records}

    def _check_vector_dim(self, shard: qe.EdgeShard, dim: int, embed_model: str) -> None:
        # A probe query that matches no point: the engine checks the vector name and size first.
        probe = qe.QueryRequest(
            limit=1,
            query=qe.Query.Nearest([0.0] * dim, using=VECTOR_NAME),
            filter=qe.Filter(must=[qe.HasIdCondition(set())]),
            with_payload=False,
            with_vector=False,
        )
        try:
            shard.query(probe)
        except (TypeError, AttributeError):
            raise
        except Exception as exc:  # qdrant-edge raises plain Exception
            if "dimension" not in str(exc) and "vector name" not in str(exc):
                raise StoreError(self._describe("check the vector size", exc)) from exc
            raise SchemaMismatchError(
                f"embedded store {self.path} has no {dim}-d vector {VECTOR_NAME!r} for embedder "
                f"{embed_model!r} ({exc}); delete {self.path} (or use a fresh state dir) and "
                "rebuild the tree, or set ADRAP_EMBED__MODEL to the model it was built with"
            ) from exc

    @contextmanager
    def _engine(self, action: str) -> Iterator[None]:
        """Translate engine failures into StoreError naming the store and the fix."""
        try:
            yield
        except (RetrieverError, TypeError, AttributeError):
            raise  # ours, or a programming error: never disguise those as a store failure
        except Exception as exc:  # qdrant-edge raises plain Exception for every engine error
            raise StoreError(self._describe(action, exc)) from exc

    def _describe(self, action: str, exc: BaseException) -> str:
        text = str(exc)
        if "WouldBlock" in text:  # the engine's flock on the WAL: another process holds it
            return (
                f"state dir {self.path} is in use by another adrap process (embedded Qdrant "
                "allows one); stop it, query through it (daemon /query), or use server mode "
                "ADRAP_QDRANT__URL"
            )
        return (
            f"embedded Qdrant store {self.path}: failed to {action}: {text}; check that the "
            f"folder is writable and has free space, or delete {self.path} and rebuild the tree "
            "(`adrap rebuild`)"
        )


def _index_schema(field: str, kind: IndexType) -> qe.PayloadSchemaType | qe.KeywordIndexParams:
    if kind is IndexType.KEYWORD:
        if field == TENANT_FIELD:
            return qe.KeywordIndexParams(is_tenant=True)
        return qe.PayloadSchemaType.Keyword
    return qe.PayloadSchemaType.Integer


def _edge_filter(flt: SearchFilter) -> qe.Filter | None:
    """Translate a SearchFilter; ``None`` means "matches nothing" (an empty ``ids``)."""
    if flt.tree == META_TREE:
        raise ValueError(f"tree {META_TREE!r} is reserved for the meta point")
    must: list[Any] = [qe.FieldCondition(key=F.TREE, match=qe.MatchValue(flt.tree))]
    if flt.min_layer is not None or flt.max_layer is not None:
        bounds = qe.RangeFloat(
            gte=None if flt.min_layer is None else float(flt.min_layer),
            lte=None if flt.max_layer is None else float(flt.max_layer),
        )
        must.append(qe.FieldCondition(key=F.LAYER, range=bounds))
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
    return qe.Filter(must=must)
