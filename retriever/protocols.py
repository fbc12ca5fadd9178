"""The pluggable parts the retriever needs: an embedder and a node store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from retriever.budget import PAPERS_FILL, FillRule
from retriever.schema import NodePayload, ScoredNode, SearchFilter


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    model_id: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` array, rows L2-normalised."""
        ...

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Return a ``(dim,)`` L2-normalised vector."""
        ...


class NodeStore(Protocol):
    """A Qdrant collection holding adrap nodes (embedded qdrant-edge or a Qdrant server)."""

    def ensure_collection(self, dim: int, embed_model: str) -> None:
        """Create the collection, its payload indexes and meta point if missing.

        Raises:
            SchemaMismatchError: it exists with another embedding model or dimension.
        """
        ...

    def upsert(self, nodes: Sequence[NodePayload], vectors: NDArray[np.float32]) -> None:
        """Write nodes (idempotent: point id = node_id)."""
        ...

    def delete(self, node_ids: Sequence[str]) -> None:
        """Delete points by node id; unknown ids are ignored."""
        ...

    def set_access(self, groups: Mapping[tuple[str, ...], Sequence[str]]) -> None:
        """Set the ``access`` field of existing points, ``{classes: node ids}``: a permission
        change rewrites this field alone (no vector, no BM25 encoding of the text again)."""
        ...

    def search(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        limit: int,
        *,
        text: str | None = None,
    ) -> list[ScoredNode]:
        """Return up to ``limit`` nodes matching ``flt``, best cosine score first.

        Given the question's ``text``, a store whose nodes carry BM25 vectors runs one hybrid
        query instead (a dense and a sparse prefetch, fused; scores are the fusion's); a store
        without them searches dense.
        """
        ...

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
        """Return ``context_hits(search(vector, flt, limit, text=text), max_tokens, rule)``
        (:mod:`retriever.budget`), reading fewer payloads.

        The collapsed-tree query: one ANN (or hybrid) search, then payloads only of the hits the
        greedy token fill keeps (stopping at the first that does not fit), less the summaries
        ``rule`` leaves out (:class:`~retriever.budget.FillRule`): their tokens go to the next
        hits.
        """
        ...

    def index_sparse(self) -> int:
        """Add the BM25 vector to every point of a store created before it, keeping the tree;
        return how many points got one (0: the store had it)."""
        ...

    def retrieve(self, node_ids: Sequence[str]) -> list[NodePayload]:
        """Return the nodes with these ids that exist, in the given order."""
        ...

    def retrieve_vectors(self, node_ids: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` array of the vectors of these ids (all must exist)."""
        ...

    def iter_ids(self, tree: str) -> Iterator[str]:
        """Yield the node id of every point of ``tree``."""
        ...

    def scroll(
        self, flt: SearchFilter, limit: int, offset: str | None = None
    ) -> tuple[list[NodePayload], str | None]:
        """Return one page of up to ``limit`` nodes matching ``flt``, in point-id order.

        ``offset`` is the node id the page starts at (None: the first page); the second value
        returned is the offset of the next page, None after the last. Cost is one page, not the
        points before it: the engine seeks to ``offset`` through its id index.
        """
        ...

    def scroll_fields(
        self, flt: SearchFilter, fields: Sequence[str], limit: int, offset: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """:meth:`scroll` reading only the payload ``fields`` (names of
        :class:`~retriever.schema.F`): one dict a point, without the fields it lacks. For readers
        of many nodes that need a few fields (the dashboard's picture of a 100k-node tree: ~1.2 s,
        whole nodes ~3 s)."""
        ...

    def count(self, flt: SearchFilter) -> int:
        """Return the exact number of points matching ``flt``."""
        ...

    def optimize(self) -> bool:
        """Build pending vector indexes now (embedded: HNSW; server: a no-op, it indexes itself)."""
        ...

    def flush(self) -> None:
        """Make every write so far durable (embedded: flush to disk; server: writes wait already)."""
        ...

    def close(self) -> None:
        """Flush and release the store (embedded: the folder lock)."""
        ...
