"""A Qdrant collection behind an alias: connecting, creating, validating, generations, closing.

The point operations are in :mod:`retriever.qdrant_store`."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any, Self

from qdrant_client import QdrantClient, models

from retriever.errors import SchemaMismatchError, StoreError
from retriever.plan import FULL_SCAN_KB, HnswConfig, Planner, StoreIndex, scan_points
from retriever.qdrant_connect import CLIENT_ERRORS
from retriever.qdrant_connect import connect as connect  # its old home; retriever.connect
from retriever.qdrant_hybrid import SPARSE_PARAMS, index_sparse_points
from retriever.schema import (
    LEAF_VECTOR,
    META_POINT_ID,
    PAYLOAD_INDEXES,
    SPARSE_VECTOR,
    SUMMARY_VECTOR,
    TENANT_FIELD,
    VECTOR_NAME,
    IndexType,
    MetaPayload,
    check_meta,
    vector_names,
)
from retriever.sparse import DEFAULT_FUSION, Fusion

log = logging.getLogger(__name__)


class QdrantCollection:
    """The collection management of :class:`~retriever.qdrant_store.QdrantNodeStore`."""

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        *,
        owns_client: bool = False,
        hnsw_ef: int | None = None,
        planner: Planner | None = None,
        hnsw: HnswConfig | None = None,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
    ) -> None:
        self.client = client
        self.collection = collection
        self.owns_client = owns_client
        self.planner = planner if planner is not None else Planner(hnsw_ef=hnsw_ef)
        self.hnsw = hnsw if hnsw is not None else HnswConfig()
        #: What the planner knows of the collection's index, read from its config by
        #: :meth:`ensure_collection` (an existing collection is planned by what it was created with).
        self.index = StoreIndex()
        #: Per filter: (when, estimated matches, estimated points) for the planner.
        self.estimates: dict[Any, tuple[float, int, int]] = {}
        #: How a hybrid search fuses its dense and BM25 prefetches.
        self.fusion: Fusion = DEFAULT_FUSION
        #: The physical collection behind the alias (read by :meth:`ensure_collection`).
        self.physical: str | None = None
        #: Distribution of a collection adrap creates on a cluster (None: the server's default, 1).
        #: Only read at creation; an existing collection keeps its own (a mismatch is logged).
        self.shard_number = shard_number
        self.replication_factor = replication_factor
        self.write_consistency_factor = write_consistency_factor
        #: Set on a store from create_next_generation(): the alias that promote() switches.
        self.alias: str | None = None
        self.dim: int | None = None
        self._closed = False

    def ensure_collection(self, dim: int, embed_model: str) -> None:
        """Create ``<name>_v1``, the alias, payload indexes and meta point if missing; validate.

        Raises:
            SchemaMismatchError: the collection has another vector size or embedding model.
            StoreError: the server failed or is unreachable.
        """
        if dim < 1:
            raise ValueError(f"vector dimension must be >= 1, got {dim}")
        self.require_open()
        with self.call("inspect collections"):
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
        self._check_distribution(info, physical)
        self.index = _read_index(info, dim)
        self.physical = physical
        meta = self._read_meta()
        check_meta(meta, embed_model=embed_model, dim=dim, where=self.where())
        with self.call("create payload indexes"):
            for field, kind in PAYLOAD_INDEXES.items():
                if field not in (info.payload_schema or {}):
                    self.client.create_payload_index(
                        physical, field, field_schema=_index_schema(field, kind), wait=True
                    )
        if meta is None:  # no vector: no search can return it
            point = models.PointStruct(
                id=META_POINT_ID,
                vector={},
                payload=MetaPayload(embed_model=embed_model, embed_dim=dim).to_payload(),
            )
            with self.call("write the meta point"):
                self.client.upsert(self.collection, points=[point], wait=True)
        self.dim = dim

    def create_next_generation(self, dim: int, embed_model: str) -> Self:
        """Create the next physical collection ``<name>_v<N+1>`` for a full rebuild.

        Write the rebuilt tree into the returned store, then call its :meth:`promote`.
        """
        base = self.alias or self.collection
        generations, live = self._generations(base)
        stale = sorted(name for name in generations if name != live)
        if stale:
            log.warning("unaliased generations %s (an interrupted rebuild?); drop them", stale)
        physical = f"{base}_v{max(generations.values(), default=0) + 1}"
        with self.call(f"create collection {physical}"):
            self._create(physical, dim)
        store = self._sibling(physical)
        store.alias = base
        store.ensure_collection(dim, embed_model)
        return store

    def pending_generation(self) -> str | None:
        """Return the newest physical generation ``<name>_v<N>`` that no alias names and that is
        newer than the live one (a model change's, under way), or None."""
        base = self.alias or self.collection
        generations, live = self._generations(base)
        floor = generations.get(live, 0) if live is not None else 0
        newer = [name for name, n in generations.items() if n > floor]
        return max(newer, key=generations.__getitem__) if newer else None

    def generation(self, physical: str, dim: int, embed_model: str) -> Self:
        """Return a store on the existing physical generation ``physical`` of this alias (to
        resume writing it), validated for ``dim``/``embed_model``; :meth:`promote` switches to it.

        Raises:
            SchemaMismatchError: it holds another model's vectors.
        """
        store = self._sibling(physical)
        store.alias = self.alias or self.collection
        store.ensure_collection(dim, embed_model)
        return store

    def drop_generation(self, physical: str) -> None:
        """Delete the physical collection ``physical`` (a generation no alias names)."""
        with self.call(f"delete collection {physical}"):
            if physical in self._aliases().values():
                raise StoreError(f"{physical} is live behind an alias; it is not dropped")
            self.client.delete_collection(physical)

    def promote(self) -> None:
        """Point the alias at this generation atomically, then drop the previous generation.

        Raises:
            ValueError: this store did not come from :meth:`create_next_generation`.
        """
        if self.alias is None:
            raise ValueError("promote() is for a store returned by create_next_generation()")
        alias = self.alias
        with self.call(f"switch alias {alias!r} to {self.collection}"):
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

    def index_sparse(self) -> int:
        """Add the BM25 vector to every point of a collection created before it (the tree, its
        summaries and dense vectors are kept); a collection that has it is left as it is.

        Returns:
            The number of points given a BM25 vector (0 if the collection had it already).

        Raises:
            StoreError: the server failed, or :meth:`ensure_collection` was not called.
        """
        self.require_open()
        if self.physical is None:
            raise StoreError(f"{self.where()}: call ensure_collection() before index_sparse()")
        if self.index.sparse:
            return 0
        done = index_sparse_points(self.client, self.collection, self.physical, self.call)
        self.index = replace(self.index, sparse=True)
        self.estimates.clear()
        log.info("added BM25 vectors to %d points of %s", done, self.where())
        return done

    def flush(self) -> None:
        """Do nothing: every write waits for the server to apply it (``wait=True``)."""

    def optimize(self) -> bool:
        """Do nothing: a Qdrant server builds its indexes in the background."""
        return False

    def close(self) -> None:
        """Release the store; closes the client only if the store owns it (idempotent)."""
        if not self._closed and self.owns_client:
            with self.call("close the client"):
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

    def _generations(self, base: str) -> tuple[dict[str, int], str | None]:
        """Return the physical collections ``<base>_v<N>`` with their N, and the one the alias
        ``base`` names (None: no alias)."""
        pattern = re.compile(rf"{re.escape(base)}_v(\d+)")
        with self.call("list collections"):
            names = [c.name for c in self.client.get_collections().collections]
            live = self._aliases().get(base)
        return {name: int(m.group(1)) for name in names if (m := pattern.fullmatch(name))}, live

    def _sibling(self, physical: str) -> Self:
        """Return this store's settings over the collection ``physical`` (another generation)."""
        return type(self)(
            self.client,
            physical,
            planner=self.planner,
            hnsw=self.hnsw,
            shard_number=self.shard_number,
            replication_factor=self.replication_factor,
            write_consistency_factor=self.write_consistency_factor,
        )

    def _create(self, physical: str, dim: int) -> None:
        self.client.create_collection(
            physical,
            vectors_config={
                name: models.VectorParams(size=dim, distance=models.Distance.COSINE)
                for name in vector_names()
            },
            sparse_vectors_config={SPARSE_VECTOR: SPARSE_PARAMS},
            hnsw_config=models.HnswConfigDiff(
                m=self.hnsw.m,
                ef_construct=self.hnsw.ef_construct,
                full_scan_threshold=self.hnsw.scan_kb(dim),
            ),
            quantization_config=models.ScalarQuantization(
                scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, always_ram=True)
            )
            if self.hnsw.quantize
            else None,
            optimizers_config=None
            if self.hnsw.indexing_kb is None
            else models.OptimizersConfigDiff(indexing_threshold=self.hnsw.indexing_kb),
            shard_number=self.shard_number,
            replication_factor=self.replication_factor,
            write_consistency_factor=self.write_consistency_factor,
        )

    def _check_distribution(self, info: models.CollectionInfo, physical: str) -> None:
        """Warn when an existing collection is distributed otherwise than configured."""
        params = info.config.params
        wanted = {
            "shard_number": self.shard_number,
            "replication_factor": self.replication_factor,
            "write_consistency_factor": self.write_consistency_factor,
        }
        for name, value in wanted.items():
            found = getattr(params, name, None)
            if value is not None and found is not None and found != value:
                log.warning(
                    "collection %s has %s=%s but ADRAP_QDRANT__%s=%s; the setting applies only "
                    "to collections adrap creates (a full rebuild creates the next one)",
                    physical,
                    name,
                    found,
                    name.upper(),
                    value,
                )

    def _aliases(self) -> dict[str, str]:
        return {a.alias_name: a.collection_name for a in self.client.get_aliases().aliases}

    def _read_meta(self) -> dict[str, Any] | None:
        """Return the meta point's payload; drop its vectors if it was written before it had
        none (so no search returns it)."""
        with self.call("read the meta point"):
            records = self.client.retrieve(
                self.collection, ids=[META_POINT_ID], with_payload=True, with_vectors=True
            )
            if records and records[0].vector:
                names = list(records[0].vector) if isinstance(records[0].vector, dict) else [""]
                self.client.delete_vectors(
                    self.collection, vectors=names, points=[META_POINT_ID], wait=True
                )
                log.info("meta point of %s: dropped its vectors %s", self.where(), names)
        return dict(records[0].payload or {}) if records else None

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

    def require_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.where()} is closed")

    def _location(self) -> str:
        opts = self.client.init_options
        if opts.get("location") == ":memory:":
            return "local in-memory Qdrant"
        if opts.get("path"):
            return f"local Qdrant at {opts['path']}"
        if opts.get("url"):
            return str(opts["url"])
        return f"{opts.get('host') or opts.get('location') or 'localhost'}:{opts.get('port')}"

    def where(self) -> str:
        return f"collection {self.collection!r} at {self._location()}"

    @contextmanager
    def call(self, action: str) -> Iterator[None]:
        """Translate client failures into StoreError naming the server, collection and fix."""
        try:
            yield
        except CLIENT_ERRORS as exc:
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
            raise StoreError(f"Qdrant {self.where()}: failed to {action}: {exc}; {fix}") from exc


def _read_index(info: models.CollectionInfo, dim: int) -> StoreIndex:
    """Return the planner's view of a collection: int8 copy or not, plain-scan threshold."""
    vectors = info.config.params.vectors
    params = vectors.get(VECTOR_NAME) if isinstance(vectors, dict) else None
    quantized = bool(info.config.quantization_config or (params and params.quantization_config))
    kb = info.config.hnsw_config.full_scan_threshold or FULL_SCAN_KB
    leaf = isinstance(vectors, dict) and LEAF_VECTOR in vectors
    summary = isinstance(vectors, dict) and SUMMARY_VECTOR in vectors
    sparse = SPARSE_VECTOR in (info.config.params.sparse_vectors or {})
    return StoreIndex(
        quantized=quantized,
        scan_points=scan_points(kb, dim),
        leaf_vector=leaf,
        summary_vector=summary,
        sparse=sparse,
    )


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
