"""An embedded qdrant-edge shard on disk: opening, creating, validating, optimising, closing.

The point operations are in :mod:`retriever.edge_store`."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import qdrant_edge as qe

from retriever.access_map import AccessMap
from retriever.errors import RetrieverError, SchemaMismatchError, StoreBusyError, StoreError
from retriever.plan import FULL_SCAN_KB, HnswConfig, Planner, StoreIndex, scan_points
from retriever.room import (
    DEFAULT_RESERVE,
    MIB,
    check_open,
    check_room,
    free_bytes,
    room_problem,
    used_bytes,
)
from retriever.schema import (
    LEAF_VECTOR,
    META_POINT_ID,
    PAYLOAD_INDEXES,
    SPARSE_VECTOR,
    SUMMARY_VECTOR,
    TENANT_FIELD,
    VECTOR_NAME,
    F,
    IndexType,
    MetaPayload,
    SearchFilter,
    check_meta,
    vector_names,
)
from retriever.sparse import (
    DEFAULT_FUSION,
    Fusion,
    bm25_documents,
    edge_sparse_params,
    reindex_sparse,
)

log = logging.getLogger(__name__)

#: ``upsert`` runs the optimizers once this many points are not in an HNSW index.
AUTO_OPTIMIZE_POINTS: Final = 20_000
#: A deferred optimize (the daemon's, when idle) also waits for this share of the store to be
#: unindexed: each optimize rebuilds the whole graph, so its cost is amortised over as many points.
OPTIMIZE_SHARE: Final = 0.1


class EdgeShardLifecycle:
    """The shard management of :class:`~retriever.edge_store.EdgeNodeStore`."""

    def __init__(
        self,
        path: Path,
        *,
        auto_optimize_points: int | None = AUTO_OPTIMIZE_POINTS,
        hnsw_ef: int | None = None,
        planner: Planner | None = None,
        hnsw: HnswConfig | None = None,
        reserve: int = DEFAULT_RESERVE,
    ) -> None:
        self.path = Path(path)
        #: Bytes every write leaves free on the store's disk (:mod:`retriever.room`).
        self.reserve = reserve
        self._short_logged = False  # an optimize skipped for want of space was said once
        self.auto_optimize_points = auto_optimize_points
        self.deferred_optimize_points: int | None = None
        self.planner = planner if planner is not None else Planner(hnsw_ef=hnsw_ef)
        self.hnsw = hnsw if hnsw is not None else HnswConfig()
        #: What the planner knows of the shard's index: read from the shard's own config, so an
        #: existing shard is planned by the config it was created with, not ``hnsw``.
        self.index = StoreIndex()
        #: The planner's estimate (matching, total points) per filter, until the next write.
        self.estimates: dict[SearchFilter, tuple[int, int]] = {}
        #: How a hybrid search fuses its dense and BM25 prefetches.
        self.fusion: Fusion = DEFAULT_FUSION
        #: Each point's access classes, kept by this store's writes (:mod:`retriever.access_map`).
        self.access_map = AccessMap()
        self.dim: int | None = None
        self._shard: qe.EdgeShard | None = None
        self._closed = False
        if self.path.is_dir() and any(self.path.iterdir()):
            check_open(self.path)
            with self.engine("open the store"):
                self._shard = qe.EdgeShard.load(str(self.path))
            try:
                meta = self._read_meta()
            except BaseException:
                self.close()  # release the folder lock: the caller never gets this object
                raise
            if meta is not None and isinstance(meta.get(F.EMBED_DIM), int):
                self.dim = meta[F.EMBED_DIM]
            self.index = read_index(self.path)
            self._strip_meta_vectors()
            log.debug("opened embedded store %s (dim=%s)", self.path, self.dim)

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
            self.room("create the store")
            graph = qe.HnswIndexConfig(
                m=self.hnsw.m,
                ef_construct=self.hnsw.ef_construct,
                full_scan_threshold=self.hnsw.scan_kb(dim),
            )
            int8 = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, always_ram=True)
            config = qe.EdgeConfig(
                vectors={
                    name: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)
                    for name in vector_names()
                },
                sparse_vectors={SPARSE_VECTOR: edge_sparse_params()},
                hnsw_config=graph,
                quantization_config=int8 if self.hnsw.quantize else None,
                optimizers=None
                if self.hnsw.indexing_kb is None
                else qe.EdgeOptimizersConfig(indexing_threshold=self.hnsw.indexing_kb),
            )
            with self.engine("create the store"):
                self._shard = qe.EdgeShard.create(str(self.path), config)
            self.index = self.hnsw.index_of(dim)
            log.info("created embedded store %s (%d-d, %s)", self.path, dim, embed_model)
        shard = self._shard
        meta = self._read_meta()
        check_meta(meta, embed_model=embed_model, dim=dim, where=f"embedded store {self.path}")
        self._check_vector_dim(shard, dim, embed_model)
        with self.engine("create payload indexes"):
            existing = set(shard.info().payload_schema)
            for field, kind in PAYLOAD_INDEXES.items():
                if field not in existing:
                    shard.update(
                        qe.UpdateOperation.create_field_index(field, _index_schema(field, kind))
                    )
        if meta is None:  # no vector: no search can return it
            payload = MetaPayload(embed_model=embed_model, embed_dim=dim).to_payload()
            with self.engine("write the meta point"):
                shard.update(
                    qe.UpdateOperation.upsert_points([qe.Point(META_POINT_ID, {}, payload)])
                )
                shard.flush()
        self.dim = dim

    def index_sparse(self) -> int:
        """Add the BM25 vector to every point of a store created before it (the tree, its
        summaries and dense vectors are kept); a store that has it is left as it is.

        Returns:
            The number of points given a BM25 vector (0 if the store had it already).

        Raises:
            StoreError: no store yet, or the engine failed.
        """
        shard = self.require()
        if self.index.sparse:
            return 0
        self.room("add the BM25 sparse vector")
        with self.engine("add the BM25 sparse vector"):
            shard.update(
                qe.UpdateOperation.create_sparse_vector(SPARSE_VECTOR, modifier=qe.Modifier.Idf)
            )

        def page(offset: qe.PointId | None) -> tuple[list[tuple[qe.PointId, str]], Any]:
            request = qe.ScrollRequest(
                offset=offset, limit=1024, with_payload=qe.PayloadSelector.Include([F.TEXT])
            )
            with self.engine("scroll the points"):
                records, after = shard.scroll(request)
            return [(r.id, (r.payload or {})[F.TEXT]) for r in records if r.payload], after

        def write(rows: list[tuple[qe.PointId, str]]) -> None:
            sparse = bm25_documents([text for _, text in rows])
            vectors = [
                qe.PointVectors(pid, {SPARSE_VECTOR: v})
                for (pid, _), v in zip(rows, sparse, strict=True)
            ]
            with self.engine("write BM25 vectors"):
                shard.update(qe.UpdateOperation.update_vectors(vectors))

        done = reindex_sparse(page, write)
        self.index = read_index(self.path)
        # the updated points moved to an appendable segment, outside the HNSW graph: rebuild it
        self.optimize()
        with self.engine("flush to disk"):
            shard.flush()
        log.info("added BM25 vectors to %d points of %s", done, self.path)
        return done

    def flush(self) -> None:
        """Flush every write so far to disk (before a state commit that references the points)."""
        shard = self.require()
        with self.engine("flush to disk"):
            shard.flush()

    def defer_optimize(self) -> None:
        """Keep index builds off the write path: ``upsert`` no longer optimizes; the owner calls
        :meth:`optimize` when :meth:`optimize_due` says so (the daemon: when idle)."""
        if self.auto_optimize_points is not None:
            self.deferred_optimize_points = self.auto_optimize_points
        self.auto_optimize_points = None

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Upserts inside the block do not optimize; the bulk writer (a build) optimizes once at
        its end. An optimize that finds work merges every segment into one (the whole graph
        again) and keeps the merged-away segments until a ``flush``: a 265k-leaf build that
        optimized every ``auto_optimize_points`` merged 13 times and mapped 6.9 GB of segments.
        """
        saved = self.auto_optimize_points
        self.auto_optimize_points = None
        try:
            yield
        finally:
            self.auto_optimize_points = saved

    def optimize_due(self) -> bool:
        """Return True if a deferred optimize should run: at least ``deferred_optimize_points``
        and ``OPTIMIZE_SHARE`` of the points are outside the HNSW index."""
        least = self.deferred_optimize_points
        if least is None or self._shard is None:
            return False
        with self.engine("read the store's info"):
            info = self._shard.info()
        unindexed = unindexed_points(info, sparse=self.index.sparse)
        return unindexed >= max(least, OPTIMIZE_SHARE * info.points_count)

    def optimize(self) -> bool:
        """Run the engine's segment optimizers (build the HNSW index), blocking until done.

        An optimize that rebuilt segments flushes: the engine keeps the segments it merged away
        on disk until a flush, so a store optimized again and again (a long-running daemon)
        would hold a copy of itself per optimize.

        Returns:
            True if any segment was rebuilt, False if the store was already optimal.
        """
        shard = self.require()
        problem = room_problem(  # its own size: the merged segments are written first
            self.path,
            self.reserve,
            "build the search index",
            extra=used_bytes(self.path) if self.reserve > 0 else 0,
        )
        if problem is not None:  # searches still answer: unindexed points are scanned
            if not self._short_logged:
                log.warning("embedded store %s: %s", self.path, problem)
            self._short_logged = True
            return False
        self._short_logged = False
        start = time.perf_counter()
        self.estimates.clear()  # merged segments estimate anew
        with self.engine("optimize (build the HNSW index)"):
            changed = shard.optimize()
            if changed:  # the engine deletes the segments it merged away at a flush, not before
                shard.flush()
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

    def take_over(self, other: Path) -> None:
        """Make the shard in folder ``other`` this store's, in place of its own (a model change's
        switch): this shard is closed, ``other`` renamed to :attr:`path` (:func:`swap_folders`:
        the old folder moved aside, then deleted) and opened. Idempotent: a switch killed
        half-way is finished by calling it again (``other`` gone: it only opens :attr:`path`).

        Raises:
            StoreError: the folders cannot be renamed or the new shard cannot be opened.
        """
        shard, self._shard = self._shard, None
        if shard is not None:
            with self.engine("close the store"):
                shard.flush()
                shard.close()
        try:
            swap_folders(self.path, Path(other))
        except OSError as exc:
            raise StoreError(
                f"cannot move the embedded store {other} into {self.path}: {exc}; check the "
                "permissions of the state dir, then run the command again (it finishes the switch)"
            ) from exc
        check_open(self.path)
        with self.engine("open the store"):
            self._shard = qe.EdgeShard.load(str(self.path))
        self._closed = False
        meta = self._read_meta()
        self.dim = meta.get(F.EMBED_DIM) if meta is not None else None
        self.index = read_index(self.path)
        self.estimates.clear()
        self.access_map.clear()
        log.info("embedded store %s: switched to the shard built in %s", self.path, other)

    def embed_model(self) -> str | None:
        """Return the embedding model the meta point names (None: no store or no meta point)."""
        if self._shard is None:
            return None
        meta = self._read_meta()
        return None if meta is None else meta.get(F.EMBED_MODEL)

    def close(self) -> None:
        """Flush to disk and release the folder lock (idempotent)."""
        shard, self._shard = self._shard, None
        self._closed = True
        self.access_map.clear()
        if shard is not None:
            with self.engine("close the store"):
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

    def require(self) -> qe.EdgeShard:
        if self._shard is None:
            if self._closed:
                raise StoreError(f"embedded store {self.path} is closed")
            raise StoreError(
                f"no adrap store in {self.path} yet; build one first (`adrap build PATH`)"
            )
        return self._shard

    def _strip_meta_vectors(self) -> None:
        """Drop the vectors of a meta point written before it had none (so no search returns
        it); done once, when the store is opened."""
        shard = self.require()
        with self.engine("migrate the meta point"):
            records = shard.retrieve([META_POINT_ID], False, True)
            if records and records[0].vector:
                names = [str(name) for name in records[0].vector]
                shard.update(qe.UpdateOperation.delete_vectors([META_POINT_ID], names))
                shard.flush()
                log.info("meta point of %s: dropped its vectors %s", self.path, names)

    def _read_meta(self) -> dict[str, Any] | None:
        shard = self.require()
        with self.engine("read the meta point"):
            records = shard.retrieve([META_POINT_ID], True, False)
        return dict(records[0].payload or {}) if records else None

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

    def room(self, action: str) -> None:
        """Raise :class:`StoreFullError` before a write when less than :attr:`reserve` is free."""
        check_room(self.path, self.reserve, action)

    @contextmanager
    def engine(self, action: str) -> Iterator[None]:
        """Translate engine failures into StoreError naming the store and the fix."""
        try:
            yield
        except (RetrieverError, TypeError, AttributeError):
            raise  # ours, or a programming error: never disguise those as a store failure
        except Exception as exc:  # qdrant-edge raises plain Exception for every engine error
            busy = "WouldBlock" in str(exc)  # the engine's flock: another process holds it
            raise (StoreBusyError if busy else StoreError)(self._describe(action, exc)) from exc

    def _describe(self, action: str, exc: BaseException) -> str:
        text = str(exc)
        if "WouldBlock" in text:  # the engine's flock on the WAL: another process holds it
            return (
                f"state dir {self.path} is in use by another adrap process (embedded Qdrant "
                "allows one); stop it, query through it (daemon /query), or use server mode "
                "ADRAP_QDRANT__URL"
            )
        hint = _os_hint(text, self.path)
        if hint is not None:  # the disk or filesystem, not the store: nothing is damaged
            return (
                f"embedded Qdrant store {self.path}: failed to {action}: {hint} ({text}); then "
                "run the command again: what was committed is kept, and the next writer deletes "
                "the points an interrupted one left"
            )
        return (
            f"embedded Qdrant store {self.path}: failed to {action}: {text}; check that the "
            f"folder is writable and has free space, or delete {self.path} and rebuild the tree "
            "(`adrap rebuild`)"
        )


def _os_hint(text: str, path: Path) -> str | None:
    """What to do about an operating system error the engine reports in ``text`` (its errno as
    ``os error N``), or None where it is not one of the filesystem's."""
    if "os error 28" in text or "No space left" in text:
        return f"the disk holding it is full ({free_bytes(path) / MIB:.0f} MiB free): free space"
    if "os error 30" in text or "Read-only file system" in text:
        return (
            "the filesystem holding it is read-only (the engine opens its files for writing, "
            "even to search): remount it read-write, or copy the state dir somewhere writable "
            "and name that one (--state-dir)"
        )
    if "os error 13" in text or "Permission denied" in text:
        return (
            "this account may not write its files: run adrap as the account that owns the state "
            "dir, or give this one its files (chown)"
        )
    if "os error 5)" in text or "Input/output error" in text:
        return "the disk answered with an I/O error: check it (the kernel's log, dmesg)"
    return None


def swap_folders(live: Path, other: Path) -> None:
    """Put folder ``other`` in place of ``live``: ``live`` is renamed aside (``<live>.old``),
    ``other`` renamed to ``live``, then the old one deleted; each rename is atomic and the
    parent directory is synced after them. Idempotent: killed between the renames, a second
    call finishes (``other`` present: moved in; ``<live>.old`` present: deleted)."""
    old = live.with_name(live.name + ".old")
    if other.is_dir():
        if old.exists():
            shutil.rmtree(old)
        if live.exists():
            os.rename(live, old)
        os.rename(other, live)
        fd = os.open(live.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    if old.exists():
        shutil.rmtree(old)


def unindexed_points(info: qe.ShardInfo, *, sparse: bool) -> int:
    """Return the points outside an HNSW graph (negative once indexed: leaves count twice).

    The engine's ``indexed_vectors_count`` counts every named vector, and a BM25 vector is
    indexed as it is written: in a store with them every point but the meta point has one.
    """
    written = max(info.points_count - 1, 0) if sparse else 0
    return info.points_count - (info.indexed_vectors_count - written)


def read_index(path: Path) -> StoreIndex:
    """Return the planner's view of the shard in ``path`` from the config the engine persisted
    (``edge_config.json``): int8 copy or not, the plain-scan threshold in points, the leaves' own
    vector or not. Reads one file: the shard need not be opened (nor its lock taken).

    A config that cannot be read plans as a store without an int8 copy: float exact scans, right
    whatever the store holds, only slower.
    """
    try:
        config = json.loads((path / "edge_config.json").read_text())
        vector = config["vectors"][VECTOR_NAME]
        dim = int(vector["size"])
        kb = int((config.get("hnsw_config") or {}).get("full_scan_threshold") or FULL_SCAN_KB)
        quantized = bool(vector.get("quantization_config") or config.get("quantization_config"))
        leaf = LEAF_VECTOR in config["vectors"]
        summary = SUMMARY_VECTOR in config["vectors"]
        sparse = SPARSE_VECTOR in (config.get("sparse_vectors") or {})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("planning %s as unquantized: its config is unreadable (%s)", path, exc)
        return StoreIndex()
    return StoreIndex(
        quantized=quantized,
        scan_points=scan_points(kb, dim),
        leaf_vector=leaf,
        summary_vector=summary,
        sparse=sparse,
    )


def _index_schema(field: str, kind: IndexType) -> qe.PayloadSchemaType | qe.KeywordIndexParams:
    if kind is IndexType.KEYWORD:
        if field == TENANT_FIELD:
            return qe.KeywordIndexParams(is_tenant=True)
        return qe.PayloadSchemaType.Keyword
    return qe.PayloadSchemaType.Integer
