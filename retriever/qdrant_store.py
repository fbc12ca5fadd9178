"""Server node store: a Qdrant server or cluster through qdrant-client.

The configured name (default ``adrap``) is an alias of a physical collection ``<name>_v<N>``, so a
full rebuild writes ``<name>_v<N+1>`` (:meth:`QdrantNodeStore.create_next_generation`) and
switches the alias atomically (:meth:`QdrantNodeStore.promote`); readers only use the alias. A real
collection that already has the bare name (made by hand) is used as it is.

Also runs on ``QdrantClient(":memory:")`` for tests: local mode supports aliases, so the same code
path runs there. Local mode ignores payload indexes (with a warning) and is not a production store.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final, Self

import grpc
import httpx
import numpy as np
from numpy.typing import NDArray
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from retriever.errors import SchemaMismatchError, StoreError
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

#: Points per upsert request.
UPSERT_BATCH: Final = 256
#: Points per scroll page / delete request.
SCROLL_PAGE: Final = 1024

# What qdrant-client raises: HTTP errors, gRPC errors, transport errors, and (local mode)
# ValueError/RuntimeError, e.g. "Collection x not found" or a closed local client.
_CLIENT_ERRORS: Final = (
    UnexpectedResponse,
    ResponseHandlingException,
    grpc.RpcError,
    httpx.HTTPError,
    ConnectionError,
    TimeoutError,
    ValueError,
    RuntimeError,
)


def connect(
    url: str,
    api_key: str | None = None,
    *,
    timeout: float = 10.0,
    https: bool | None = None,
    verify: bool | str = True,
    prefer_grpc: bool = False,
) -> QdrantClient:
    """Build a client for a Qdrant server (no request is sent yet).

    Args:
        url: ``http(s)://host:port`` of the server.
        api_key: The server's API key, if it requires one.
        timeout: Request timeout in seconds (rounded up to whole seconds by qdrant-client).
        https: Force TLS on or off (``None``: from the URL scheme).
        verify: TLS verification: True, False, or a CA bundle path (REST only).
        prefer_grpc: Use gRPC (port 6334) for data requests.

    Raises:
        StoreError: the URL is malformed.
    """
    extra: dict[str, Any] = {} if verify is True else {"verify": verify}
    try:
        return QdrantClient(
            url=url,
            api_key=api_key,
            timeout=math.ceil(timeout),
            https=https,
            prefer_grpc=prefer_grpc,
            # The version check runs in a thread and only warns; the first request fails clearly.
            check_compatibility=False,
            **extra,
        )
    except ValueError as exc:
        raise StoreError(f"invalid Qdrant URL {url!r}: {exc}; check ADRAP_QDRANT__URL") from exc


class QdrantNodeStore:
    """A :class:`~retriever.protocols.NodeStore` on a Qdrant collection (alias) via qdrant-client.

    Args:
        client: A connected client (see :func:`connect`), or ``QdrantClient(":memory:")``.
        collection: The alias (or real collection) every read and write goes through.
        owns_client: Close ``client`` in :meth:`close`.
        hnsw_ef: HNSW search breadth (``None``: the server's default).
    """

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        *,
        owns_client: bool = False,
        hnsw_ef: int | None = None,
    ) -> None:
        self.client = client
        self.collection = collection
        self.owns_client = owns_client
        self.hnsw_ef = hnsw_ef
        #: Set on a store from create_next_generation(): the alias that promote() switches.
        self.alias: str | None = None
        self.dim: int | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    def ensure_collection(self, dim: int, embed_model: str) -> None:
        """Create ``<name>_v1``, the alias, payload indexes and meta point if missing; validate.

        Raises:
            SchemaMismatchError: the collection has another vector size or embedding model.
            StoreError: the server failed or is unreachable.
        """
        if dim < 1:
            raise ValueError(f"vector dimension must be >= 1, got {dim}")
        self._require_open()
        with self._call("inspect collections"):
            aliases = self._aliases()
            if self.collection in aliases:
                physical = aliases[self.collection]
            elif self.client.collection_exists(self.collection):
                physical = self.collection
            else:
                physical = f"{self.collection}_v1"
                if not self.client.collection_exists(physical):
                    self._create(physical, dim)
                self.client.update_collection_aliases(
                    change_aliases_operations=[_create_alias(physical, self.collection)]
                )
                log.info("created collection %s with alias %s", physical, self.collection)
            info = self.client.get_collection(physical)
        self._check_vectors_config(info, physical, dim, embed_model)
        meta = self._read_meta()
        check_meta(meta, embed_model=embed_model, dim=dim, where=self._where())
        with self._call("create payload indexes"):
            for field, kind in PAYLOAD_INDEXES.items():
                if field not in (info.payload_schema or {}):
                    self.client.create_payload_index(
                        physical, field, field_schema=_index_schema(field, kind), wait=True
                    )
        if meta is None:
            point = models.PointStruct(
                id=META_POINT_ID,
                vector={VECTOR_NAME: [1.0] + [0.0] * (dim - 1)},
                payload=MetaPayload(embed_model=embed_model, embed_dim=dim).to_payload(),
            )
            with self._call("write the meta point"):
                self.client.upsert(self.collection, points=[point], wait=True)
        self.dim = dim

    def create_next_generation(self, dim: int, embed_model: str) -> QdrantNodeStore:
        """Create the next physical collection ``<name>_v<N+1>`` for a full rebuild.

        Write the rebuilt tree into the returned store, then call its :meth:`promote`.
        """
        base = self.alias or self.collection
        pattern = re.compile(rf"{re.escape(base)}_v(\d+)")
        with self._call("list collections"):
            names = [c.name for c in self.client.get_collections().collections]
            live = self._aliases().get(base)
        generations = {name: int(m.group(1)) for name in names if (m := pattern.fullmatch(name))}
        stale = sorted(name for name in generations if name != live)
        if stale:
            log.warning("unaliased generations %s (an interrupted rebuild?); drop them", stale)
        physical = f"{base}_v{max(generations.values(), default=0) + 1}"
        with self._call(f"create collection {physical}"):
            self._create(physical, dim)
        store = QdrantNodeStore(self.client, physical, hnsw_ef=self.hnsw_ef)
        store.alias = base
        store.ensure_collection(dim, embed_model)
        return store

    def promote(self) -> None:
        """Point the alias at this generation atomically, then drop the previous generation.

        Raises:
            ValueError: this store did not come from :meth:`create_next_generation`.
        """
        if self.alias is None:
            raise ValueError("promote() is for a store returned by create_next_generation()")
        alias = self.alias
        with self._call(f"switch alias {alias!r} to {self.collection}"):
            old = self._aliases().get(alias)
            ops: list[Any] = []
            if old is not None:
                ops.append(
                    models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
                )
            elif self.client.collection_exists(alias):
                # A real collection holds the bare name: it must go before the alias can take it.
                log.warning(
                    "replacing hand-made collection %s by alias -> %s", alias, self.collection
                )
                self.client.delete_collection(alias)
            ops.append(_create_alias(self.collection, alias))
            self.client.update_collection_aliases(change_aliases_operations=ops)
            if old is not None and old != self.collection:
                self.client.delete_collection(old)
        log.info("alias %s now points at %s (dropped %s)", alias, self.collection, old)

    def optimize(self) -> bool:
        """Do nothing: a Qdrant server builds its indexes in the background."""
        return False

    def close(self) -> None:
        """Release the store; closes the client only if the store owns it (idempotent)."""
        if not self._closed and self.owns_client:
            with self._call("close the client"):
                self.client.close()
        self._closed = True

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
            StoreError: the server failed or is unreachable.
        """
        arr = check_vectors(nodes, vectors, self.dim)
        for node in nodes:
            check_node(node)
        self._require_open()
        with self._call(f"upsert {len(nodes)} points"):
            for start in range(0, len(nodes), UPSERT_BATCH):
                batch = nodes[start : start + UPSERT_BATCH]
                rows = arr[start : start + UPSERT_BATCH].tolist()
                points = [
                    models.PointStruct(
                        id=node.node_id, vector={VECTOR_NAME: row}, payload=node.to_payload()
                    )
                    for node, row in zip(batch, rows, strict=True)
                ]
                self.client.upsert(self.collection, points=points, wait=True)

    def delete(self, node_ids: Sequence[str]) -> None:
        """Delete points by node id; unknown ids are ignored (the meta point is never deleted)."""
        ids = [i for i in check_ids(node_ids) if i != META_POINT_ID]
        self._require_open()
        with self._call(f"delete {len(ids)} points"):
            for start in range(0, len(ids), SCROLL_PAGE):
                page: list[models.ExtendedPointId] = list(ids[start : start + SCROLL_PAGE])
                self.client.delete(
                    self.collection, points_selector=models.PointIdsList(points=page), wait=True
                )

    # -- reads -----------------------------------------------------------------------------------

    def search(
        self, vector: NDArray[np.float32], flt: SearchFilter, limit: int
    ) -> list[ScoredNode]:
        """Return up to ``limit`` nodes matching ``flt``, best cosine score first.

        Raises:
            ValueError: ``flt.tree`` is the reserved meta tree, or the vector/limit is invalid.
            StoreError: the server failed or is unreachable.
        """
        hits = self._query(vector, flt, limit, with_payload=True)
        return [ScoredNode(NodePayload.from_payload(h.payload), float(h.score)) for h in hits]

    def search_budget(
        self, vector: NDArray[np.float32], flt: SearchFilter, limit: int, max_tokens: int
    ) -> list[ScoredNode]:
        """Return ``fill_budget(search(vector, flt, limit), max_tokens)``, fetching less.

        One ANN query returning only ``n_tokens``, the greedy fill (hits in score order while the
        running total stays <= ``max_tokens``, stopping at the first that does not fit) on those,
        then one lookup of the kept nodes' payloads: two requests, a fraction of the payload bytes.

        Raises:
            ValueError: as :meth:`search`, or ``max_tokens < 1``.
            StoreError: the server failed or is unreachable.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        hits = self._query(vector, flt, limit, with_payload=[F.N_TOKENS])
        kept: list[tuple[str, float]] = []
        total = 0
        for hit in hits:
            n_tokens = int((hit.payload or {}).get(F.N_TOKENS, 0))
            if total + n_tokens > max_tokens:
                break
            total += n_tokens
            kept.append((str(hit.id), float(hit.score)))
        found = self._records([i for i, _ in kept], with_payload=True)
        return [
            ScoredNode(NodePayload.from_payload(found[i].payload), score)
            for i, score in kept
            if i in found
        ]

    def retrieve(self, node_ids: Sequence[str]) -> list[NodePayload]:
        """Return the nodes with these ids that exist, in the given order."""
        return ordered_payloads(self._records(node_ids, with_payload=True), node_ids)

    def retrieve_vectors(self, node_ids: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` array of the stored (L2-normalised) vectors of these ids.

        Raises:
            StoreError: some ids have no point (named in the message).
        """
        ids = check_ids(node_ids)
        return ordered_vectors(self._records(ids, with_payload=False), ids, self.dim, self._where())

    def iter_ids(self, tree: str) -> Iterator[str]:
        """Yield the node id of every point of ``tree`` (scrolled in pages).

        Raises:
            ValueError: ``tree`` is the reserved meta tree (raised at the call, not on iteration).
        """
        scroll_filter = _qdrant_filter(SearchFilter(tree=tree))
        self._require_open()
        return self._scroll(scroll_filter, tree)

    def _scroll(self, scroll_filter: models.Filter | None, tree: str) -> Iterator[str]:
        offset: Any = None
        while True:
            with self._call(f"scroll tree {tree!r}"):
                records, offset = self.client.scroll(
                    self.collection,
                    scroll_filter=scroll_filter,
                    limit=SCROLL_PAGE,
                    offset=offset,
                    with_payload=False,
                    with_vectors=False,
                )
            yield from (str(r.id) for r in records)
            if offset is None:
                return

    def count(self, flt: SearchFilter) -> int:
        """Return the exact number of points matching ``flt``."""
        count_filter = _qdrant_filter(flt)
        if count_filter is None:
            return 0
        self._require_open()
        with self._call("count"):
            return self.client.count(self.collection, count_filter=count_filter, exact=True).count

    # -- internals -------------------------------------------------------------------------------

    def _query(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        limit: int,
        *,
        with_payload: bool | list[str],
    ) -> list[models.ScoredPoint]:
        query = check_query(vector, self.dim)
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        query_filter = _qdrant_filter(flt)
        if query_filter is None or limit == 0:
            return []
        self._require_open()
        params = models.SearchParams(hnsw_ef=self.hnsw_ef) if self.hnsw_ef is not None else None
        with self._call("search"):
            return self.client.query_points(
                self.collection,
                query=query,
                using=VECTOR_NAME,
                query_filter=query_filter,
                search_params=params,
                limit=limit,
                with_payload=with_payload,
                with_vectors=False,
            ).points

    def _create(self, physical: str, dim: int) -> None:
        self.client.create_collection(
            physical,
            vectors_config={
                VECTOR_NAME: models.VectorParams(size=dim, distance=models.Distance.COSINE)
            },
        )

    def _aliases(self) -> dict[str, str]:
        return {a.alias_name: a.collection_name for a in self.client.get_aliases().aliases}

    def _read_meta(self) -> dict[str, Any] | None:
        with self._call("read the meta point"):
            records = self.client.retrieve(
                self.collection, ids=[META_POINT_ID], with_payload=True, with_vectors=False
            )
        return dict(records[0].payload or {}) if records else None

    def _records(self, node_ids: Sequence[str], *, with_payload: bool) -> dict[str, models.Record]:
        ids: list[models.ExtendedPointId] = list(
            dict.fromkeys(i for i in check_ids(node_ids) if i != META_POINT_ID)
        )
        if not ids:
            return {}
        self._require_open()
        with_vectors: list[str] | bool = False if with_payload else [VECTOR_NAME]
        with self._call(f"retrieve {len(ids)} points"):
            records = self.client.retrieve(
                self.collection, ids=ids, with_payload=with_payload, with_vectors=with_vectors
            )
        return {str(r.id): r for r in records}

    def _check_vectors_config(
        self, info: models.CollectionInfo, physical: str, dim: int, embed_model: str
    ) -> None:
        vectors = info.config.params.vectors
        params = vectors.get(VECTOR_NAME) if isinstance(vectors, dict) else None
        if params is None or params.size != dim:
            found = f"vector size {params.size}" if params else f"no vector named {VECTOR_NAME!r}"
            raise SchemaMismatchError(
                f"collection {physical!r} at {self._location()} has {found} but embedder "
                f"{embed_model!r} produces {dim}-d {VECTOR_NAME!r} vectors; rebuild into a new "
                "collection (ADRAP_QDRANT__COLLECTION=...) or set ADRAP_EMBED__MODEL"
            )

    def _require_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self._where()} is closed")

    def _location(self) -> str:
        opts = self.client.init_options
        if opts.get("location") == ":memory:":
            return "local in-memory Qdrant"
        if opts.get("path"):
            return f"local Qdrant at {opts['path']}"
        if opts.get("url"):
            return str(opts["url"])
        return f"{opts.get('host') or opts.get('location') or 'localhost'}:{opts.get('port')}"

    def _where(self) -> str:
        return f"collection {self.collection!r} at {self._location()}"

    @contextmanager
    def _call(self, action: str) -> Iterator[None]:
        """Translate client failures into StoreError naming the server, collection and fix."""
        try:
            yield
        except _CLIENT_ERRORS as exc:
            status = getattr(exc, "status_code", None)
            if status in (401, 403):
                fix = "check the API key (ADRAP_QDRANT__API_KEY)"
            elif status == 404 or "not found" in str(exc).lower():
                fix = "create it first (`adrap build`) or check ADRAP_QDRANT__COLLECTION"
            else:
                fix = (
                    f"is the Qdrant server at {self._location()} running? "
                    "check ADRAP_QDRANT__URL / API key"
                )
            raise StoreError(f"Qdrant {self._where()}: failed to {action}: {exc}; {fix}") from exc


def _create_alias(physical: str, alias: str) -> models.CreateAliasOperation:
    return models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name=physical, alias_name=alias)
    )


def _index_schema(
    field: str, kind: IndexType
) -> models.PayloadSchemaType | models.KeywordIndexParams:
    if kind is IndexType.KEYWORD:
        if field == TENANT_FIELD:
            return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
        return models.PayloadSchemaType.KEYWORD
    return models.PayloadSchemaType.INTEGER


def _qdrant_filter(flt: SearchFilter) -> models.Filter | None:
    """Translate a SearchFilter; ``None`` means "matches nothing" (an empty ``ids``)."""
    if flt.tree == META_TREE:
        raise ValueError(f"tree {META_TREE!r} is reserved for the meta point")
    must: list[models.Condition] = [
        models.FieldCondition(key=F.TREE, match=models.MatchValue(value=flt.tree))
    ]
    if flt.min_layer is not None or flt.max_layer is not None:
        must.append(
            models.FieldCondition(
                key=F.LAYER, range=models.Range(gte=flt.min_layer, lte=flt.max_layer)
            )
        )
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
    return models.Filter(must=must)
