"""Embedded node store: Qdrant's engine in-process (qdrant-edge), on disk under the state dir.

One edge shard is one collection. The folder is locked by the process that opens it (a second
opener, even in the same process, fails), so one adrap process owns an embedded store; others
query through it (daemon ``/query``) or use server mode (``ADRAP_QDRANT__URL``).

Indexing: qdrant-edge runs no background optimizer. Upserts land in a plain (brute-force)
appendable segment until :meth:`EdgeNodeStore.optimize` runs the segment optimizers, which build
the HNSW graph of a segment past the engine's indexing threshold (10 MB of vectors, ~6.7k points
at 384-d; below it ``optimize()`` returns in ~50 us). An optimize that finds work also merges
segments: the whole store's graph again (2 busy cores, m=16: ~2 s per 10k, 45-300 s per 100k
384-d points; m=32 about twice), holding the GIL. ``upsert`` optimizes only once
``auto_optimize_points`` points are unindexed (a plain search of 20k points: ~1-2 ms); a writer
calls ``optimize()`` once after a full build.

Searching: each query is planned by :mod:`retriever.plan` from the payload indexes' estimate of
the points the filter keeps (~20-50 us, remembered per filter until the next write): a scan of
few points (the engine's own scan of the int8 copy, rescored, on a store created with
quantization; a float exact scan on an older one), else an HNSW walk whose breadth grows as the
filter narrows. The shard's creation settings are read from its ``edge_config.json`` (``index``).

Payloads: the engine parses a point's whole payload to return any of it (~15-40 us per hit), so
:meth:`EdgeNodeStore.search_budget` asks first for only the hits its budget could take and reads
payloads only for the hits the token fill can use.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Final, TypeVar

import numpy as np
import qdrant_edge as qe
from numpy.typing import NDArray

from retriever.access_map import (
    ACCESS_PAGE,
    READABLE_WALK_MARGIN,
    READABLE_WALK_MAX,
    READABLE_WALK_MIN_SHARE,
)
from retriever.budget import PAPERS_FILL, FillRule, fill_hits, ties_by_id
from retriever.edge_shard import EdgeShardLifecycle, unindexed_points
from retriever.edge_translate import (
    edge_filter,
    edge_points,
    edge_query_request,
    edge_term_sample,
    graph_filter,
)
from retriever.edge_translate import edge_search_params as edge_search_params  # the facade uses it
from retriever.plan import ESTIMATE_MEMO, SearchPlan, first_hits, search_planned
from retriever.reader_copy import CopyHit
from retriever.schema import (
    META_POINT_ID,
    VECTOR_NAME,
    F,
    NodePayload,
    ScoredNode,
    SearchFilter,
)
from retriever.sparse import (
    DEFAULT_BOUND,
    HybridBound,
    TermSample,
    bounded_query,
)
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

#: Points per engine update call.
UPSERT_BATCH: Final = 256
#: Points per scroll page in :meth:`EdgeNodeStore.iter_ids`.
SCROLL_PAGE: Final = 1024
_T = TypeVar("_T")

log = logging.getLogger(__name__)

#: A hit of a query: the engine's, or a reader's copy's (retriever.reader_copy).
_Scored = qe.ScoredPoint | CopyHit

#: The engine's filter of a SearchFilter, remembered (a reader's: ~80 us for 50 classes).
_edge_filter = functools.lru_cache(maxsize=ESTIMATE_MEMO)(edge_filter)


class EdgeNodeStore(EdgeShardLifecycle):
    """A :class:`~retriever.protocols.NodeStore` on an embedded qdrant-edge shard in ``path``.

    The shard is loaded (and its folder locked) at construction if ``path`` holds one; otherwise
    :meth:`ensure_collection` creates it. Use as a context manager or call :meth:`close`.

    Args:
        path: The shard folder (created if missing).
        auto_optimize_points: Unindexed points that make ``upsert`` build the HNSW index before
            returning; ``None`` leaves indexing to explicit :meth:`optimize` calls.
        hnsw_ef: HNSW search breadth of an unfiltered query (``None``: the planner's default);
            shorthand for ``planner=Planner(hnsw_ef=...)``.
        planner: Chooses exact scan or HNSW walk (and its breadth) per query, see
            :mod:`retriever.plan`.
        hnsw: The HNSW graph and int8 quantization a new shard is created with (an existing
            shard keeps its own, and is planned by it).
        reserve: Bytes every write leaves free on the store's disk (a write is refused with
            :class:`~retriever.errors.StoreFullError` before, an index build skipped; 0: never
            checked). See :mod:`retriever.room`.

    Raises:
        StoreError: the folder is locked by another process or is not a readable shard.
    """

    #: How far a hybrid search's BM25 prefetch walks (:class:`~retriever.sparse.HybridBound`).
    hybrid_bound: HybridBound = DEFAULT_BOUND
    #: The document frequencies the bound is judged by, read when a hybrid search needs them.
    term_sample: TermSample | None = None

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
        shard = self.require()
        self.estimates.clear()
        with self.engine(f"upsert {len(nodes)} points"), self._keeping_access():
            for start in range(0, len(nodes), UPSERT_BATCH):
                # each batch: a build's layer of 100k leaves writes ~0.7 GB, past any reserve
                self.room(f"write {len(nodes) - start} points")
                batch = nodes[start : start + UPSERT_BATCH]
                rows = arr[start : start + UPSERT_BATCH].tolist()
                points = edge_points(batch, rows, self.index)
                shard.update(qe.UpdateOperation.upsert_points(points))
                self.access_map.put((n.node_id, n.access) for n in batch)
            self.access_map.copies.put([n.node_id for n in nodes], arr, shard, _edge_filter)
            info = shard.info()
        unindexed = unindexed_points(info, sparse=self.index.sparse)
        if self.auto_optimize_points is not None and unindexed >= self.auto_optimize_points:
            self.optimize()

    def delete(self, node_ids: Sequence[str]) -> None:
        """Delete points by node id; unknown ids are ignored (the meta point is never deleted)."""
        ids = [i for i in check_ids(node_ids) if i != META_POINT_ID]
        if not ids:
            return
        shard = self.require()
        self.room(f"delete {len(ids)} points")
        self.estimates.clear()
        with self.engine(f"delete {len(ids)} points"), self._keeping_access():
            for start in range(0, len(ids), SCROLL_PAGE):
                page: list[qe.PointId] = list(ids[start : start + SCROLL_PAGE])
                shard.update(qe.UpdateOperation.delete_points(page))
                self.access_map.drop(ids[start : start + SCROLL_PAGE])

    def set_access(self, groups: Mapping[tuple[str, ...], Sequence[str]]) -> None:
        """Set the ``access`` field of existing points (see ``NodeStore.set_access``)."""
        if not groups:
            return
        shard = self.require()
        action = f"set the access of {sum(map(len, groups.values()))} points"
        self.room(action)
        self.estimates.clear()
        with self.engine(action), self._keeping_access():
            for classes, node_ids in groups.items():
                ids = check_ids(node_ids)
                for start in range(0, len(ids), SCROLL_PAGE):
                    page: list[qe.PointId] = list(ids[start : start + SCROLL_PAGE])
                    op = qe.UpdateOperation.set_payload(page, {F.ACCESS: list(classes)})
                    shard.update(op)
                self.access_map.assign({classes: ids})

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
        question's ``text`` in a store with BM25 vectors, best fused score first (hybrid).

        Raises:
            ValueError: ``flt.tree`` is the reserved meta tree, or the vector/limit is invalid.
            StoreError: the engine failed.
        """
        hits = self._query(vector, flt, limit, limit, text, with_payload=True)
        nodes = [(NodePayload.from_payload(h.payload), float(h.score)) for h in hits]
        return [ScoredNode(n, score) for n, score in nodes if self._may_read(flt, n)]

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
        """Return ``context_hits(search(vector, flt, limit), max_tokens, rule)``, reading
        fewer payloads (:func:`~retriever.budget.context_fill`: the greedy fill, without the
        summaries ``rule`` leaves out).

        The same planned ANN query without payloads, first for only the hits the budget could
        take (:func:`~retriever.plan.first_hits`; ``limit`` only if every one fits); then the
        best hits' payloads in batches while the fill takes nodes: 16, then as many as the
        tokens left would take at the smallest node seen, plus one. The engine parses a point's
        whole payload even to return one field. The hits' ids (each read builds a ``uuid.UUID``,
        ~2 us) are read only for the batches fetched, and go back to the engine unchecked.

        Raises:
            ValueError: as :meth:`search`, or ``max_tokens < 1``.
            StoreError: the engine failed.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        first = first_hits(limit, max_tokens)
        fetched: dict[qe.PointId, dict[str, Any]] = {}
        hits = self._query(vector, flt, first, limit, text)
        may_read = functools.partial(self._may_read, flt)
        kept, stopped = fill_hits(hits, self._payloads, may_read, max_tokens, rule, fetched)
        if not stopped and len(hits) == first < limit:  # every hit fit: the rest may too
            again = self._query(vector, flt, limit, limit, text)
            kept, _ = fill_hits(again, self._payloads, may_read, max_tokens, rule, fetched)
        return kept

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
        return ordered_vectors(found, ids, self.dim, f"embedded store {self.path}")

    def iter_ids(self, tree: str) -> Iterator[str]:
        """Yield the node id of every point of ``tree`` (scrolled in pages).

        Raises:
            ValueError: ``tree`` is the reserved meta tree (raised at the call, not on iteration).
        """
        return self._scroll(self.require(), _edge_filter(SearchFilter(tree=tree)), tree)

    def scroll(
        self, flt: SearchFilter, limit: int, offset: str | None = None
    ) -> tuple[list[NodePayload], str | None]:
        """Return one page of nodes matching ``flt`` in point-id order, and the next offset.

        Raises:
            ValueError: ``limit < 1``, ``offset`` is not a node id, or ``flt.tree`` is reserved.
            StoreError: the engine failed.
        """
        records, after = self._page(flt, limit, offset, True)
        return [NodePayload.from_payload(r.payload) for r in records], after

    def scroll_fields(
        self, flt: SearchFilter, fields: Sequence[str], limit: int, offset: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """:meth:`scroll` reading only the payload ``fields`` of each point (the engine converts
        those alone: a 100k-node tree in ~1.2 s, whole nodes ~3 s).

        Raises:
            ValueError: as :meth:`scroll`, or a field is not a node's.
            StoreError: the engine failed.
        """
        selector = qe.PayloadSelector.Include(check_fields(fields))
        records, after = self._page(flt, limit, offset, selector)
        return [dict(r.payload or {}) for r in records], after

    def _page(
        self,
        flt: SearchFilter,
        limit: int,
        offset: str | None,
        with_payload: bool | qe.PayloadSelector,
    ) -> tuple[list[qe.Record], str | None]:
        """One scroll page of the points matching ``flt`` and the next page's offset."""
        start = check_page(limit, offset)
        edge_filter = _edge_filter(flt)
        if edge_filter is None:
            return [], None
        shard = self.require()
        request = qe.ScrollRequest(
            offset=start,
            limit=limit,
            filter=edge_filter,
            with_payload=with_payload,
            with_vector=False,
        )
        with self.engine(f"scroll a page of tree {flt.tree!r}"):
            records, after = shard.scroll(request)
        return records, None if after is None else str(after)

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
            with self.engine(f"scroll tree {tree!r}"):
                records, offset = shard.scroll(request)
            yield from (str(r.id) for r in records)
            if offset is None:
                return

    def count(self, flt: SearchFilter) -> int:
        """Return the exact number of points matching ``flt``."""
        edge_filter = _edge_filter(flt)
        if edge_filter is None:
            return 0
        shard = self.require()
        with self.engine("count"):
            return shard.count(qe.CountRequest(exact=True, filter=edge_filter))

    def plan(self, flt: SearchFilter, limit: int) -> SearchPlan:
        """Return how a search with ``flt`` runs: exact scan or HNSW walk (see retriever.plan).

        The number of matching points is the payload indexes' estimate (~20-50 us, no point read),
        remembered per filter until this store's next write (the folder lock makes it the only
        writer), or at most ``len(flt.ids)`` for an id filter.
        """
        return self._plan(flt, _edge_filter(flt), limit)

    def _plan(self, flt: SearchFilter, edge_filter: qe.Filter | None, limit: int) -> SearchPlan:
        if edge_filter is None:
            return self.planner.plan(0, 0, limit, self.index)
        if flt.ids is not None and len(flt.ids) <= self.planner.exact_max_points:
            return self.planner.plan(len(flt.ids), len(flt.ids), limit, self.index)
        seen = self.estimates.get(flt)
        if seen is None:
            shard = self.require()
            graph = graph_filter(self.index.vector_for(flt))
            with self.engine("estimate the matching points"):
                matches = shard.count(qe.CountRequest(exact=False, filter=edge_filter))
                total = (
                    shard.info().points_count
                    if graph is None
                    else shard.count(qe.CountRequest(exact=False, filter=graph))
                )
            if len(self.estimates) >= ESTIMATE_MEMO:
                self.estimates.clear()
            seen = self.estimates[flt] = (matches, total)
        return self.planner.plan_filter(flt, *seen, limit, self.index)

    def read_shard(self, action: str, read: Callable[[qe.EdgeShard], _T]) -> _T:
        """Return ``read(shard)``, engine failures raised as StoreError naming ``action``.

        The one door to the raw shard, for readers that speak the engine's own request types
        (:mod:`retriever.facade.edge`, Qdrant's REST API over this store). ``read`` must not write:
        every write goes through :meth:`upsert` and :meth:`delete`.

        Raises:
            StoreError: no shard yet (nothing built), the store is closed, or the engine failed.
        """
        shard = self.require()
        with self.engine(action):
            return read(shard)

    # -- internals -------------------------------------------------------------------------------

    def _may_read(self, flt: SearchFilter, node: NodePayload) -> bool:
        """Whether a hit read from the engine is the caller's: a reader's hits came from the
        access map (:meth:`_readable_walk`); their payloads, read to serve them, say again."""
        if flt.may_read(node.access):
            return True
        log.error(
            "the access map let point %s through for a caller who may not read it (classes %s);"
            " it is filled again", node.node_id, list(node.access),
        )  # fmt: skip
        self.access_map.clear()
        return False

    @contextmanager
    def _keeping_access(self) -> Iterator[None]:
        """A write that failed part way leaves the access map unsure: it is filled again."""
        try:
            yield
        except BaseException:
            self.access_map.clear()
            raise

    def fill_access_page(self, points: int = ACCESS_PAGE) -> bool:
        """Read a page more of what readers' queries wait on: a reader's copy
        (:meth:`~retriever.reader_copy.ReaderCopies.fill_page`), else, once a reader's walk
        wanted it, the classes of up to ``points`` more points into the access map
        (:meth:`~retriever.access_map.AccessMap.fill_from`); return whether nothing waits."""
        amap = self.access_map
        map_due = not amap.complete and (amap.wanted or amap.filling)
        if not (map_due or amap.copies.wanted):
            return True
        with self.engine("read the points' access classes"):
            if amap.copies.wanted:
                return amap.copies.fill_page(self.require(), _edge_filter) and not map_due
            return amap.fill_from(self.require(), points, self.path)

    def _readable_walk(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        edge_filter: qe.Filter,
        limit: int,
        depth: int,
        text: str | None,
        with_payload: bool,
    ) -> Sequence[_Scored] | None:
        """A reader's hits as the readable points of the unfiltered ranking
        (:mod:`retriever.access_map`): a walk without the reader's classes, the unreadable
        dropped by the map. It asks for ``limit / share`` hits times
        :data:`READABLE_WALK_MARGIN` (share: the store's points the reader may read, counted by
        the access map; the engine's estimate of a reader filter was 12.6k where 29.5k matched),
        or for the walk's breadth if more (the walk visits that many anyway), each rescored once.
        None where the reader's own plan is better: it scans (few readable points), the share is
        below :data:`READABLE_WALK_MIN_SHARE`, the walk would pass :data:`READABLE_WALK_MAX`, or
        it kept too few (a question among points the reader may not read).
        """
        own = self._plan(flt, edge_filter, limit)
        if own.exact or own.scan:
            return None
        amap = self.access_map
        if not amap.complete:  # filled beside the queries (fill_access_page); the engine's
            amap.wanted = True  # filter meanwhile
            return None
        ok, share = amap.reader_share(flt.readable or ())
        if share < READABLE_WALK_MIN_SHARE:
            return None
        base = replace(flt, readable=None)
        first = math.ceil(limit / share * READABLE_WALK_MARGIN)
        first = max(first, self._plan(base, _edge_filter(base), first).hnsw_ef or 0)
        if first > READABLE_WALK_MAX:
            return None
        deeper = max(first, math.ceil(depth / share * READABLE_WALK_MARGIN))
        hits = self._query(
            vector, base, first, deeper, text, with_payload=with_payload, rescore=1.0
        )
        kept = amap.readable_hits(hits, ok, limit)
        return kept if len(kept) == limit or len(hits) < first else None

    def _query(
        self,
        vector: NDArray[np.float32],
        flt: SearchFilter,
        limit: int,
        depth: int,
        text: str | None,
        *,
        with_payload: bool = False,
        rescore: float | None = None,
    ) -> Sequence[_Scored]:
        """The planned query; hybrid (a dense prefetch of ``depth`` hits and a BM25 prefetch cut
        to :attr:`hybrid_bound`, fused) given ``text`` in a store with BM25 vectors. A hybrid
        query is not retried as an exact scan: its sparse prefetch fills in what a cut-off walk
        misses. Equal scores come in id order (:func:`~retriever.budget.ties_by_id`)."""
        query = check_query(vector, self.dim)
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        edge_filter = _edge_filter(flt)
        if edge_filter is None or limit == 0:
            return []
        reader = bool(flt.readable) and flt.ids is None
        if reader:
            walked = self._readable_walk(vector, flt, edge_filter, limit, depth, text, with_payload)
            if walked is not None:
                return walked
        shard = self.require()
        using = self.index.vector_for(flt)
        dense_depth, sparse_depth = self.hybrid_bound.depths(limit, depth)
        sparse = (
            bounded_query(text, self._term_sample(), self.hybrid_bound, sparse_depth)
            if text is not None and self.index.sparse
            else None
        )
        dense_hits = limit if sparse is None else max(limit, dense_depth)
        copied = self._copied(vector, flt, edge_filter, dense_hits) if reader else None
        if copied is not None and sparse is None:
            return ties_by_id(self._with_payloads(copied) if with_payload else copied)
        dense_ids = None if copied is None else qe.HasIdCondition({h.id for h in copied})

        def run(plan: SearchPlan) -> list[qe.ScoredPoint]:
            request = edge_query_request(
                query,
                using,
                edge_filter,
                limit,
                edge_search_params(plan),
                with_payload=with_payload,
                sparse=sparse,
                fusion=self.fusion,
                prefetch_limit=dense_depth,
                sparse_limit=sparse_depth,
                dense_ids=dense_ids,
            )
            with self.engine("search"):
                return shard.query(request)

        plan = self._plan(flt, edge_filter, dense_depth if sparse is not None else limit)
        if rescore is not None and plan.oversampling is not None:
            plan = replace(plan, oversampling=rescore)
        return ties_by_id(run(plan) if sparse is not None else search_planned(plan, limit, run))

    def _copied(
        self, vector: NDArray[np.float32], flt: SearchFilter, edge_filter: qe.Filter, n: int
    ) -> list[CopyHit] | None:
        """A reader's ``n`` best dense hits from the copy of their points (scanned exactly in
        memory, :mod:`retriever.reader_copy`), where their own plan scans; None: the engine's."""
        own = self._plan(flt, edge_filter, n)
        if not (own.exact or own.scan):
            return None
        return self.access_map.copies.hits(flt, vector, n)

    def _with_payloads(self, hits: list[CopyHit]) -> list[CopyHit]:
        payloads = self._payloads([h.id for h in hits])
        return [replace(h, payload=payloads[h.id]) for h in hits if h.id in payloads]

    def _term_sample(self) -> TermSample | None:
        """Return the store's :class:`~retriever.sparse.TermSample` (read again once stale): the
        BM25 vectors of the first :data:`~retriever.sparse.SAMPLE_POINTS` points in id order,
        uuid5 hashes, so an even spread over the store's trees and files."""
        if self.hybrid_bound.postings is None:
            return None
        sample = self.term_sample
        if sample is None or sample.stale():
            shard = self.require()
            with self.engine("sample the BM25 vectors"):
                sample = self.term_sample = edge_term_sample(shard)
        return sample

    def _records(
        self, node_ids: Sequence[str], *, with_payload: bool, checked: bool = False
    ) -> dict[str, qe.Record]:
        """The records of ``node_ids`` by canonical id (``checked``: the ids are canonical
        already, :func:`check_ids`' output: not parsed again, ~2.6 us an id)."""
        ids: list[qe.PointId] = list(
            dict.fromkeys(
                i for i in (node_ids if checked else check_ids(node_ids)) if i != META_POINT_ID
            )
        )
        if not ids:
            return {}
        shard = self.require()
        with_vector: list[str] | bool = False if with_payload else [VECTOR_NAME]
        with self.engine(f"retrieve {len(ids)} points"):
            # The stub marks both flags optional but the engine requires them positionally.
            records = shard.retrieve(ids, with_payload, with_vector)
        return {str(r.id): r for r in records}

    def _payloads(self, point_ids: list[qe.PointId]) -> dict[qe.PointId, dict[str, Any]]:
        """Return the payloads of points by the engine's own ids (as a query returned them: no
        uuid re-validation nor string round trip, ~6 us a point saved); missing points left out."""
        shard = self.require()
        with self.engine(f"retrieve {len(point_ids)} points"):
            records = shard.retrieve(point_ids, True, False)
        return {r.id: r.payload or {} for r in records}
