"""Sharing the pipeline between the update worker and queries, and stopping a first build.

:class:`LockedStore` serialises each call into the store (short: one upsert page, one search), so
a query waits at most for one store call of the writer, never for its whole batch.
The update worker yields the CPU to queries by its thread's priority
(:mod:`ingestor.tree.background`). qdrant-edge is
an in-process engine whose documentation (Edge API, shard lifecycle) states no thread-safety
guarantee for concurrent calls on one ``EdgeShard``, hence the lock; a
Qdrant server client could go without it, and costs nothing with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from ingestor.service.deadline import holding
from ingestor.tree.params import Progress
from retriever import NodePayload, NodeStore, ScoredNode, SearchFilter
from retriever.budget import PAPERS_FILL, FillRule

if TYPE_CHECKING:
    from retriever.edge_store import EdgeNodeStore
    from retriever.plan import HnswConfig, Planner, StoreIndex

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Cancelled(Exception):
    """The daemon was asked to stop during a long stage (the first build); nothing was committed."""


def cancellable(progress: Progress, stop: threading.Event) -> Progress:
    """Return a progress callback that raises :class:`Cancelled` once ``stop`` is set."""

    def report(stage: str, done: int, total: int) -> None:
        if stop.is_set():
            raise Cancelled(f"stopped during {stage!r} ({done}/{total})")
        progress(stage, done, total)

    return report


def lock_store(store: NodeStore) -> LockedStore:
    """Return ``store`` behind a lock per call (the daemon's), its index builds deferred to
    idle time (the daemon's maintenance), never inside an update."""
    defer = getattr(store, "defer_optimize", None)
    if defer is not None:
        defer()
    return LockedStore(store)


class LockedStore(NodeStore):
    """A NodeStore that holds one lock around every call into the wrapped store.

    Each method of :class:`~retriever.protocols.NodeStore` is here, typed as there, and calls
    ``inner``'s under the lock (a request past its deadline stops at the lock: deadline.py);
    ``iter_ids`` is drained under it. ``inner`` is the wrapped store, to ask what kind it is;
    readers that need more of it than a NodeStore take it with :meth:`held` (:class:`LockedShard`).
    """

    def __init__(self, inner: NodeStore) -> None:
        self.inner = inner
        self._lock = threading.RLock()

    def held(self) -> AbstractContextManager[None]:
        """Hold the store's lock for the block, waiting no longer than the thread's deadline."""
        return holding(self._lock)

    def ensure_collection(self, dim: int, embed_model: str) -> None:
        with self.held():
            self.inner.ensure_collection(dim, embed_model)

    def upsert(self, nodes: Sequence[NodePayload], vectors: NDArray[np.float32]) -> None:
        with self.held():
            self.inner.upsert(nodes, vectors)

    def delete(self, node_ids: Sequence[str]) -> None:
        with self.held():
            self.inner.delete(node_ids)

    def set_access(self, groups: Mapping[tuple[str, ...], Sequence[str]]) -> None:
        with self.held():
            self.inner.set_access(groups)

    def search(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        limit: int,
        *,
        text: str | None = None,
    ) -> list[ScoredNode]:
        with self.held():
            return self.inner.search(vector, flt, limit, text=text)

    def search_budget(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        limit: int,
        max_tokens: int,
        *,
        text: str | None = None,
        rule: FillRule = PAPERS_FILL,
    ) -> list[ScoredNode]:
        with self.held():
            return self.inner.search_budget(vector, flt, limit, max_tokens, text=text, rule=rule)

    def index_sparse(self) -> int:
        with self.held():
            return self.inner.index_sparse()

    def retrieve(self, node_ids: Sequence[str]) -> list[NodePayload]:
        with self.held():
            return self.inner.retrieve(node_ids)

    def retrieve_vectors(self, node_ids: Sequence[str]) -> NDArray[np.float32]:
        with self.held():
            return self.inner.retrieve_vectors(node_ids)

    def iter_ids(self, tree: str) -> Iterator[str]:
        with self.held():
            return iter(list(self.inner.iter_ids(tree)))

    def scroll(
        self, flt: SearchFilter, limit: int, offset: str | None = None
    ) -> tuple[list[NodePayload], str | None]:
        with self.held():
            return self.inner.scroll(flt, limit, offset)

    def scroll_fields(
        self, flt: SearchFilter, fields: Sequence[str], limit: int, offset: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        with self.held():
            return self.inner.scroll_fields(flt, fields, limit, offset)

    def count(self, flt: SearchFilter) -> int:
        with self.held():
            return self.inner.count(flt)

    def optimize(self) -> bool:
        with self.held():
            return self.inner.optimize()

    def flush(self) -> None:
        with self.held():
            self.inner.flush()

    def close(self) -> None:
        with self.held():
            self.inner.close()

    def fill_access_page(self) -> bool:
        """A page more of the wrapped store's access map (see
        :meth:`~retriever.edge_store.EdgeNodeStore.fill_access_page`), under the lock; True
        (nothing to fill) for a store without one."""
        fill = getattr(self.inner, "fill_access_page", None)
        if fill is None:
            return True
        with self.held():
            return bool(fill())

    def bulk_writes(self) -> AbstractContextManager[None]:
        """The wrapped store's bulk-write mode, where it has one (:func:`bulk_writes` of
        :mod:`ingestor.pipeline.context` asks for it by name; a build's upserts run in it)."""
        bulk = getattr(self.inner, "bulk_writes", None)
        return bulk() if bulk is not None else nullcontext()


class LockedShard:
    """The embedded store as the Qdrant REST facade reads it
    (:class:`~retriever.facade.edge.ShardReader`): each raw shard read under the daemon's store
    lock, the store's configuration (``dim``, ``planner``, ``hnsw``, ``index``) as it is now."""

    def __init__(self, locked: LockedStore, store: EdgeNodeStore) -> None:
        self._locked = locked
        self._store = store

    @property
    def dim(self) -> int | None:
        return self._store.dim

    @property
    def planner(self) -> Planner:
        return self._store.planner

    @property
    def hnsw(self) -> HnswConfig:
        return self._store.hnsw

    @property
    def index(self) -> StoreIndex:
        return self._store.index

    def read_shard(self, action: str, read: Callable[[Any], _T]) -> _T:
        with self._locked.held():
            return self._store.read_shard(action, read)
