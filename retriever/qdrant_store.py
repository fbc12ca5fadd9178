"""Server node store: a Qdrant server or cluster through qdrant-client.

The configured name (default ``adrap``) is an alias of a physical collection ``<name>_v<N>``, so a
full rebuild writes ``<name>_v<N+1>`` (:meth:`QdrantNodeStore.create_next_generation`) and
switches the alias atomically (:meth:`QdrantNodeStore.promote`); readers only use the alias. A real
collection that already has the bare name (made by hand) is used as it is.

Also runs on ``QdrantClient(":memory:")`` for tests: local mode supports aliases, so the same code
path runs there. Local mode ignores payload indexes (with a warning) and is not a production store.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from qdrant_client import QdrantClient, models

from retriever.budget import PAPERS_FILL, FillRule, context_fill, ties_by_id
from retriever.plan import ESTIMATE_MEMO, SearchPlan, first_hits, search_planned
from retriever.qdrant_collection import QdrantCollection
from retriever.qdrant_hybrid import fusion_query, hybrid_prefetch, qdrant_points, sample_terms
from retriever.qdrant_translate import graph_filter as _graph_filter
from retriever.qdrant_translate import qdrant_filter as _qdrant_filter
from retriever.qdrant_translate import search_params
from retriever.schema import (
    META_POINT_ID,
    VECTOR_NAME,
    F,
    NodePayload,
    ScoredNode,
    SearchFilter,
)
from retriever.sparse import DEFAULT_BOUND, HybridBound, TermSample, bounded_query
from retriever.validation import (
    check_fields,
    check_ids,
    check_node,
    check_page,
    check_query,
    check_vectors,
    ordered_payloads,
    ordered_vectors,
)

#: Points per upsert request.
UPSERT_BATCH: Final = 256
#: Points per scroll page / delete request.
SCROLL_PAGE: Final = 1024
#: Seconds a filter's estimated cardinality is reused for planning (two count requests each).
ESTIMATE_TTL: Final = 30.0


class QdrantNodeStore(QdrantCollection):
    """A :class:`~retriever.protocols.NodeStore` on a Qdrant collection (alias) via qdrant-client.

    Args:
        client: A connected client (see :func:`connect`), or ``QdrantClient(":memory:")``.
        collection: The alias (or real collection) every read and write goes through.
        owns_client: Close ``client`` in :meth:`close`.
        hnsw_ef: HNSW search breadth of an unfiltered query (``None``: the planner's default);
            shorthand for ``planner=Planner(hnsw_ef=...)``.
        planner: Chooses exact scan or HNSW walk (and its breadth) per query, see
            :mod:`retriever.plan`; the plan is sent as the query's search params.
        hnsw: The HNSW graph and int8 quantization a new collection is created with (an existing
            one keeps its own, and is planned by it).
    """

    #: How far a hybrid search's prefetches fetch (:class:`~retriever.sparse.HybridBound`).
    hybrid_bound: HybridBound = DEFAULT_BOUND
    #: The document frequencies the bound is judged by, read when a hybrid search needs them.
    term_sample: TermSample | None = None

    # -- lifecycle -------------------------------------------------------------------------------

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
        self.require_open()
        self.estimates.clear()
        with self.call(f"upsert {len(nodes)} points"):
            for start in range(0, len(nodes), UPSERT_BATCH):
                batch = nodes[start : start + UPSERT_BATCH]
                rows = arr[start : start + UPSERT_BATCH].tolist()
                points = qdrant_points(batch, rows, self.index)
                self.client.upsert(self.collection, points=points, wait=True)

    def delete(self, node_ids: Sequence[str]) -> None:
        """Delete points by node id; unknown ids are ignored (the meta point is never deleted)."""
        ids = [i for i in check_ids(node_ids) if i != META_POINT_ID]
        self.require_open()
        self.estimates.clear()
        with self.call(f"delete {len(ids)} points"):
            for start in range(0, len(ids), SCROLL_PAGE):
                page: list[models.ExtendedPointId] = list(ids[start : start + SCROLL_PAGE])
                self.client.delete(
                    self.collection, points_selector=models.PointIdsList(points=page), wait=True
                )

    def set_access(self, groups: Mapping[tuple[str, ...], Sequence[str]]) -> None:
        """Set the ``access`` field of existing points (see ``NodeStore.set_access``)."""
        self.require_open()
        self.estimates.clear()
        with self.call(f"set the access of {sum(map(len, groups.values()))} points"):
            for classes, node_ids in groups.items():
                ids: list[models.ExtendedPointId] = list(check_ids(node_ids))
                for start in range(0, len(ids), SCROLL_PAGE):
                    self.client.set_payload(
                        self.collection,
                        payload={F.ACCESS: list(classes)},
                        points=ids[start : start + SCROLL_PAGE],
                        wait=True,
                    )

    # -- reads -----------------------------------------------------------------------------------

    def search(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        limit: int,
        *,
        text: str | None = None,
    ) -> list[ScoredNode]:
        """Return up to ``limit`` nodes matching ``flt``, best cosine score first; with the
        question's ``text`` in a collection with BM25 vectors, best fused score first (hybrid).

        Raises:
            ValueError: ``flt.tree`` is the reserved meta tree, or the vector/limit is invalid.
            StoreError: the server failed or is unreachable.
        """
        hits = self._query(vector, flt, limit, limit, text, with_payload=True)
        return [ScoredNode(NodePayload.from_payload(h.payload), float(h.score)) for h in hits]

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
        """Return ``context_hits(search(vector, flt, limit), max_tokens, rule)``, fetching
        less (:func:`~retriever.budget.context_fill`).

        One ANN query returning only ``n_tokens`` and ``content_hash`` (and ``children``, where
        ``rule`` leaves summaries out), first for only the hits the budget could take
        (:func:`~retriever.plan.first_hits`; for ``limit`` hits only if every one fits), the
        fill on those, then one lookup of the kept nodes' payloads: two requests, a fraction of
        the payload bytes.

        Raises:
            ValueError: as :meth:`search`, or ``max_tokens < 1``.
            StoreError: the server failed or is unreachable.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        first = first_hits(limit, max_tokens)
        fields = [F.N_TOKENS, F.CONTENT_HASH] + ([] if rule.plain else [F.CHILDREN])
        hits = self._query(vector, flt, first, limit, text, with_payload=fields)
        kept, stopped = _fill_ids(hits, max_tokens, rule)
        if not stopped and len(hits) == first < limit:  # every hit fit: the rest may too
            again = self._query(vector, flt, limit, limit, text, with_payload=fields)
            kept, _ = _fill_ids(again, max_tokens, rule)
        found = self._records([i for i, _ in kept], with_payload=True)
        return [
            ScoredNode(NodePayload.from_payload(found[i].payload), score)
            for i, score in kept
            if i in found
        ]

    def retrieve(self, node_ids: Sequence[str]) -> list[NodePayload]:
        """Return the nodes with these ids that exist, in the given order."""
        ids = check_ids(node_ids)
        return ordered_payloads(self._records(ids, with_payload=True, checked=True), ids)

    def retrieve_vectors(self, node_ids: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` array of the stored (L2-normalised) vectors of these ids.

        Raises:
            StoreError: some ids have no point (named in the message).
        """
        ids = check_ids(node_ids)
        found = self._records(ids, with_payload=False, checked=True)
        return ordered_vectors(found, ids, self.dim, self.where())

    def iter_ids(self, tree: str) -> Iterator[str]:
        """Yield the node id of every point of ``tree`` (scrolled in pages).

        Raises:
            ValueError: ``tree`` is the reserved meta tree (raised at the call, not on iteration).
        """
        scroll_filter = _qdrant_filter(SearchFilter(tree=tree))
        self.require_open()
        return self._scroll(scroll_filter, tree)

    def scroll(
        self, flt: SearchFilter, limit: int, offset: str | None = None
    ) -> tuple[list[NodePayload], str | None]:
        """Return one page of nodes matching ``flt`` in point-id order, and the next offset.

        Raises:
            ValueError: ``limit < 1``, ``offset`` is not a node id, or ``flt.tree`` is reserved.
            StoreError: the server failed or is unreachable.
        """
        records, after = self._page(flt, limit, offset, True)
        return [NodePayload.from_payload(r.payload) for r in records], after

    def scroll_fields(
        self, flt: SearchFilter, fields: Sequence[str], limit: int, offset: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """:meth:`scroll` reading only the payload ``fields`` of each point.

        Raises:
            ValueError: as :meth:`scroll`, or a field is not a node's.
            StoreError: the server failed or is unreachable.
        """
        records, after = self._page(flt, limit, offset, check_fields(fields))
        return [dict(r.payload or {}) for r in records], after

    def _page(
        self, flt: SearchFilter, limit: int, offset: str | None, with_payload: bool | list[str]
    ) -> tuple[list[models.Record], str | None]:
        """One scroll page of the points matching ``flt`` and the next page's offset."""
        start = check_page(limit, offset)
        scroll_filter = _qdrant_filter(flt)
        if scroll_filter is None:
            return [], None
        self.require_open()
        with self.call(f"scroll a page of tree {flt.tree!r}"):
            records, after = self.client.scroll(
                self.collection,
                scroll_filter=scroll_filter,
                limit=limit,
                offset=start,
                with_payload=with_payload,
                with_vectors=False,
            )
        return records, None if after is None else str(after)

    def _scroll(self, scroll_filter: models.Filter | None, tree: str) -> Iterator[str]:
        offset: Any = None
        while True:
            with self.call(f"scroll tree {tree!r}"):
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
        self.require_open()
        with self.call("count"):
            return self.client.count(self.collection, count_filter=count_filter, exact=True).count

    def plan(self, flt: SearchFilter, limit: int) -> SearchPlan:
        """Return how a search with ``flt`` runs: exact scan or HNSW walk (see retriever.plan).

        The number of matching points is the server's estimate from its payload indexes (a count
        with ``exact=False``), remembered per filter for :data:`ESTIMATE_TTL` seconds and
        forgotten on this store's writes; at most ``len(flt.ids)`` for an id filter.
        """
        query_filter = _qdrant_filter(flt)
        if query_filter is None:
            return self.planner.plan(0, 0, limit, self.index)
        if flt.ids is not None and len(flt.ids) <= self.planner.exact_max_points:
            return self.planner.plan(len(flt.ids), len(flt.ids), limit, self.index)
        memo = self.estimates
        now = time.monotonic()
        seen = memo.get(flt)
        if seen is None or now - seen[0] > ESTIMATE_TTL:
            self.require_open()
            with self.call("estimate the matching points"):
                matches = self.client.count(self.collection, count_filter=query_filter, exact=False)
                total = self.client.count(
                    self.collection,
                    count_filter=_graph_filter(self.index.vector_for(flt)),
                    exact=False,
                )
            if len(memo) >= ESTIMATE_MEMO:
                memo.clear()
            seen = memo[flt] = (now, matches.count, total.count)
        return self.planner.plan_filter(flt, seen[1], seen[2], limit, self.index)

    # -- internals -------------------------------------------------------------------------------

    def _query(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        limit: int,
        depth: int,
        text: str | None,
        *,
        with_payload: bool | list[str],
    ) -> list[models.ScoredPoint]:
        """The planned query; hybrid (prefetches of at most ``depth`` hits and the BM25 query cut
        to :attr:`hybrid_bound`, as the embedded store's, fused) given ``text`` in a collection
        with BM25 vectors, then not retried as an exact scan. Equal scores come in id order
        (:func:`~retriever.budget.ties_by_id`)."""
        query = check_query(vector, self.dim)
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        query_filter = _qdrant_filter(flt)
        if query_filter is None or limit == 0:
            return []
        self.require_open()
        using = self.index.vector_for(flt)
        hybrid = text is not None and self.index.sparse
        depths = self.hybrid_bound.depths(limit, depth)
        plan = self.plan(flt, depths[0] if hybrid else limit)
        local = _is_local(self.client)  # always scans exactly and warns about search params
        if hybrid:
            assert text is not None
            params = None if local else search_params(plan)
            sparse = bounded_query(text, self._term_sample(), self.hybrid_bound, depths[1])
            prefetch = hybrid_prefetch(query, using, sparse, query_filter, params, depths)
            with self.call("search"):
                points = self.client.query_points(
                    self.collection,
                    prefetch=prefetch,
                    query=fusion_query(self.fusion),
                    query_filter=query_filter,
                    limit=limit,
                    with_payload=with_payload,
                    with_vectors=False,
                ).points
        elif local:
            points = self._run(query, using, query_filter, None, limit, with_payload)
        else:
            points = search_planned(
                plan,
                limit,
                lambda p: self._run(
                    query, using, query_filter, search_params(p), limit, with_payload
                ),
            )
        return ties_by_id(points)

    def _term_sample(self) -> TermSample | None:
        """Return the collection's term sample (read again once stale; none unbounded)."""
        if self.hybrid_bound.postings is None:
            return None
        if self.term_sample is None or self.term_sample.stale():
            self.term_sample = sample_terms(self.client, self.collection, self.call)
        return self.term_sample

    def _run(
        self,
        query: list[float],
        using: str,
        query_filter: models.Filter,
        params: models.SearchParams | None,
        limit: int,
        with_payload: bool | list[str],
    ) -> list[models.ScoredPoint]:
        with self.call("search"):
            return self.client.query_points(
                self.collection,
                query=query,
                using=using,
                query_filter=query_filter,
                search_params=params,
                limit=limit,
                with_payload=with_payload,
                with_vectors=False,
            ).points

    def _records(
        self, node_ids: Sequence[str], *, with_payload: bool, checked: bool = False
    ) -> dict[str, models.Record]:
        """The records of ``node_ids`` by canonical id (``checked``: the ids are canonical
        already, :func:`check_ids`' output: not parsed again, ~2.6 us an id)."""
        ids: list[models.ExtendedPointId] = list(
            dict.fromkeys(
                i for i in (node_ids if checked else check_ids(node_ids)) if i != META_POINT_ID
            )
        )
        if not ids:
            return {}
        self.require_open()
        with_vectors: list[str] | bool = False if with_payload else [VECTOR_NAME]
        with self.call(f"retrieve {len(ids)} points"):
            records = self.client.retrieve(
                self.collection, ids=ids, with_payload=with_payload, with_vectors=with_vectors
            )
        return {str(r.id): r for r in records}


def _fill_ids(
    hits: Sequence[models.ScoredPoint], max_tokens: int, rule: FillRule
) -> tuple[list[tuple[str, float]], bool]:
    """Return the fill's (:func:`~retriever.budget.context_fill`) ``(id, score)`` on hits
    carrying ``n_tokens`` (and ``children``), and whether it stopped inside them."""
    taken, took_all = context_fill(
        hits,
        max_tokens,
        rule,
        key=_point_key,
        n_tokens=_n_tokens,
        children=_children,
        text_key=_text_hash,
    )
    return [(str(hit.id), float(hit.score)) for hit in taken], not took_all


def _point_key(hit: models.ScoredPoint) -> str:
    return str(hit.id)


def _n_tokens(hit: models.ScoredPoint) -> int:
    """The ``n_tokens`` of a hit queried with only that payload field (0 if absent)."""
    return int((hit.payload or {}).get(F.N_TOKENS, 0))


def _text_hash(hit: models.ScoredPoint) -> str:
    """The ``content_hash`` of a hit queried with that payload field ("" if absent)."""
    return str((hit.payload or {}).get(F.CONTENT_HASH) or "")


def _children(hit: models.ScoredPoint) -> list[str]:
    """The ``children`` of a hit queried with that payload field (none if absent)."""
    return list((hit.payload or {}).get(F.CHILDREN) or ())


def _is_local(client: QdrantClient) -> bool:
    """Return whether ``client`` runs qdrant-client's local mode (``:memory:`` or a path)."""
    opts = client.init_options
    return opts.get("location") == ":memory:" or bool(opts.get("path"))
