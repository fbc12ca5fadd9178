"""Search planning for one filtered query: a scan of the matching points, or an HNSW walk.

Both adapters plan the same way and send the plan as search parameters (``exact`` / ``hnsw_ef`` /
``quantization``), so the embedded engine and a Qdrant server behave alike.

Why plan at all: a filtered HNSW walk only steps through points that pass the filter, so the
fewer points a filter keeps, the more the graph restricted to them falls apart and the more true
neighbours the walk misses (bench/query.py, 100k nodes, m=32: recall@100 0.97 at a 60 % filter,
0.84 at a 10 % layer filter, both at ef=128). A scan is right and costs in proportion to the
points it scores, whereas the walk costs about the same whatever the filter keeps. Up to
:data:`EXACT_MAX_POINTS` matching points the scan is chosen; above, the walk runs with a breadth
that grows as the filter gets more selective (:func:`hnsw_ef_for`).

Which scan: a store created with :attr:`HnswConfig.quantize` keeps an int8 copy of every vector
(scalar quantization, in RAM). The engine scans those itself when a filter keeps fewer points than
its ``full_scan_threshold`` (which a new store sets to cover :data:`EXACT_MAX_POINTS`, see
:meth:`HnswConfig.scan_kb`), then rescores the best ``OVERSAMPLING x limit`` candidates with the
float vectors: ~2.3x cheaper than the float scan (10k matching points at 100k: ~1.6 against
~3.7 ms CPU on a loaded machine) at recall@100 1.00 on the bench. The ``exact`` search parameter
makes the engine ignore the int8 copy, so a quantized store is never sent ``exact``; a store
without one (any store created before quantization) gets the float ``exact`` scan as before
(~0.25 us per matching point). Walks on a quantized store score the int8 copy too, rescored the
same way.

The number of matching points comes from the payload indexes' cardinality estimate (a count with
``exact=False``: tens of microseconds on the embedded engine, no point is read), or is bounded by
``len(ids)`` for an id filter without asking the engine at all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from retriever.schema import SearchFilter, search_vector

log = logging.getLogger(__name__)

_Hit = TypeVar("_Hit")

#: At most this many (estimated) matching points: scan them exactly instead of walking the graph.
EXACT_MAX_POINTS: Final = 12_000
#: A walk filtered to what a restricted caller may read is this much broader: the filter drops
#: whole regions of the graph (a folder's files sit together), unlike a layer filter's spread
#: (bench/access.py, 100k nodes, a caller reading 50 of 100 classes: recall@100 0.851 at the
#: plain breadth; 30k nodes: 0.84 at 1x, 1.00 at 2x and 3x, for ~2x the unfiltered p50).
ACCESS_WALK_EF_FACTOR: Final = 2.5
#: HNSW breadth of an unfiltered search (also the floor for filtered ones); never below ``limit``.
BASE_HNSW_EF: Final = 128
#: Leaves-only filters (``layer == 0``, e.g. postQFRAP's default base) are scanned exactly up to
#: this many matching points: a summary is the hub of its children in the graph, and a walk that
#: may not step through summaries falls apart (bench/query.py, recall@100 0.17-0.46 at 100k
#: nodes at any ef up to 1024, and 0.22 at 1M nodes, fill-recall 0.34; 0.93-1.00 for the other
#: filters). Exact is right at any size; it costs ~0.25 us a point (~12 ms for 50k leaves,
#: ~0.1 s for 500k). Hence no bound by default. Only for stores without the leaves' own graph
#: (:data:`~retriever.schema.LEAF_VECTOR`, created before it): in the others a leaves-only
#: filter walks that graph like any filter walks the graph of every node.
LEAVES_EXACT_MAX_POINTS: Final = 2**62
#: A walk of the leaves' own graph (:data:`~retriever.schema.LEAF_VECTOR`) is this much broader:
#: leaves are the scattered points of the corpus, summaries its centres (bench/query.py, 100k
#: nodes, 50 % leaves-only filter: recall@100 0.936 at ef=183, 0.963 at 365 for 1.55 -> 1.71 ms;
#: 0.952-0.964 over three fresh builds at 365, so 2.5: 0.970 at ef=456 on the same store, 1.63 ms).
#: Those breadths were planned against every node (selectivity 0.50); against the leaves' own
#: graph that filter keeps 0.60 of it, so 2.75 asks for the same ef=456.
LEAF_WALK_EF_FACTOR: Final = 2.75
#: A walk of the summaries' own graph (:data:`~retriever.schema.SUMMARY_VECTOR`) is this much
#: broader: a summary sits among its siblings, means of neighbouring children, so the top 100
#: are many near-equal points (bench/query.py, 1M nodes, 170k summaries, a 60 % tree filter:
#: recall@100 0.862 at ef=166, 0.939 at 331, 0.975 at 496 in one build; 0.952 at 400, 0.971 at
#: 500, 0.981 at 600 in another; 0.945 at 500, 0.959 at 600, 0.970 at 700 in a third, built with
#: ef_construct=256; 3.6 asks for ef=602).
SUMMARY_WALK_EF_FACTOR: Final = 3.6
#: A walk of the leaves' own graph among more than :data:`MATCHES_AT_BASE_EF` leaves grows faster
#: than in proportion to them: the corpus's scattered points leave a walk more near-equal
#: candidates per leaf added (bench/query.py, 1M nodes, a 50 % leaves-only filter, 500k of 830k
#: leaves: recall@100 0.925 at ef=1011, 0.956 at 2021, 0.969 at 3031 in one build; 0.939 at
#: 2000, 0.950 at 2500, 0.958 at 3000, 0.963 at 3500 in another; 1.2 asks for ef=3137). A walk
#: of a node's own graph (leaves' or summaries') is capped at ``max_hnsw_ef`` times its factor,
#: as its base is.
LEAF_MATCHES_GROWTH: Final = 1.2
#: ... and a walk of every node's graph (or the summaries') by this power of them: 0.5 asked for
#: ef=405 on a 60 % tree filter at 1M nodes, recall@100 0.951 in one build and 0.942 in another;
#: that build found 0.954 at 600, 0.962 at 800, 0.968 at 1000 (0.9 asks for ef=829).
MATCHES_GROWTH: Final = 0.9
#: The breadths above were measured with this many matching points; a walk among more is broader
#: by ``(matches / MATCHES_AT_BASE_EF) ** MATCHES_GROWTH``: HNSW's recall at a fixed breadth
#: falls as the points it must pick the top ``limit`` from grow (bench/query.py, the 60 % tree
#: filter at ef=166: recall@100 0.974-0.981 at 100k nodes, 0.920-0.929 at 1M; ef=331: 0.937,
#: ef=496: 0.947). A filter on a folder keeps few points, each linked to the others by the
#: folder's own graph links: 88k of 1M at ef=430 already reach 0.978, so the count of matches,
#: not of the store, sets the breadth.
MATCHES_AT_BASE_EF: Final = 100_000
#: Upper bound of the breadth the planner asks for (the walk's cost grows about linearly in it:
#: ~5-8 ms at ef=512 on 1M nodes, ~15 ms at 1024 on these 2 cores); 1280 because a leaves' walk
#: at 1M nodes asks for more than 2.75 x 1024 (see :data:`LEAF_MATCHES_GROWTH`).
MAX_HNSW_EF: Final = 1280
#: HNSW graph built by both adapters: links per point (32: recall@100 0.97 at ef=128 under a 60 %
#: filter on the 100k bench, against 0.90 with 16) and build breadth.
HNSW_M: Final = 32
HNSW_EF_CONSTRUCT: Final = 128
#: Qdrant's default plain-search threshold, in KB of vectors: what a store created before
#: :meth:`HnswConfig.scan_kb` existed (or whose config cannot be read) has.
FULL_SCAN_KB: Final = 10_000
#: Candidates scored on the int8 copy per hit asked for, then rescored with the float vectors
#: (1.5: recall@100 0.999, min 0.97 over 100 queries; 2.0: 1.000 on the 10 % filters at 100k).
OVERSAMPLING: Final = 2.0
#: Filters whose cardinality estimates an adapter remembers at most (the memo is dropped beyond).
ESTIMATE_MEMO: Final = 256
#: ``search_budget`` first asks for the hits that would fill its budget with nodes of this many
#: tokens on average (:func:`first_hits`), and for its whole ``limit`` only if all of them fit.
FIRST_HITS_TOKENS: Final = 64
#: ... and for at least this many (one payload batch of the embedded store).
FIRST_HITS_MIN: Final = 16
#: Bytes per stored vector component (float32): Qdrant converts ``full_scan_threshold`` KB to points
#: with it.
_BYTES_PER_DIM: Final = 4


@dataclass(frozen=True, slots=True)
class HnswConfig:
    """The HNSW graph a new store is created with (an existing store keeps its own).

    Args:
        m: Links per point (more: better-connected graph under filters, slower build).
        ef_construct: Build breadth (more: better graph, slower build).
        full_scan_kb: Below this many KB of matching vectors the engine itself scans instead of
            walking the graph (per segment; also: payload values kept by fewer points get no
            extra graph links). ``None``: the KB of :data:`EXACT_MAX_POINTS` vectors at the
            store's dimension (:meth:`scan_kb`), so that the planner's scans are the engine's
            quantized ones.
        indexing_kb: A segment gets a graph once it holds this many KB of vectors (``None``:
            the engine's default, 10 MB); small stores are scanned, which is exact and fast.
        quantize: Keep an int8 copy of every vector in RAM (scalar quantization, ~1/4 of the
            float vectors' size) that scans and walks score before rescoring with the floats.
    """

    m: int = HNSW_M
    ef_construct: int = HNSW_EF_CONSTRUCT
    full_scan_kb: int | None = None
    indexing_kb: int | None = None
    quantize: bool = True

    def __post_init__(self) -> None:
        for name in ("m", "ef_construct", "full_scan_kb", "indexing_kb"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"HNSW {name} must be >= 1, got {value}")

    def scan_kb(self, dim: int) -> int:
        """Return the ``full_scan_threshold`` (KB) a new store of ``dim``-d vectors gets."""
        if self.full_scan_kb is not None:
            return self.full_scan_kb
        return math.ceil((EXACT_MAX_POINTS + 1) * dim * _BYTES_PER_DIM / 1024)

    def index_of(self, dim: int) -> StoreIndex:
        """Return what the planner needs to know of a store created with this config."""
        return StoreIndex(
            quantized=self.quantize,
            scan_points=scan_points(self.scan_kb(dim), dim),
            leaf_vector=True,
            summary_vector=True,
            sparse=True,
        )


@dataclass(frozen=True, slots=True)
class StoreIndex:
    """What the planner must know of a store's index: fixed when the store is created.

    Args:
        quantized: The store keeps an int8 copy of its vectors (scans and walks are rescored).
        scan_points: The engine scans a segment itself (no graph walk) when fewer points match
            (its ``full_scan_threshold``, in points).
        leaf_vector: Leaves carry a second vector (:data:`~retriever.schema.LEAF_VECTOR`) with
            a graph of their own: leaves-only filters walk it like any other filter.
        summary_vector: Summaries carry a second vector
            (:data:`~retriever.schema.SUMMARY_VECTOR`) with a graph of their own, which
            summaries-only filters walk.
        sparse: Every node carries its BM25 vector (:data:`~retriever.schema.SPARSE_VECTOR`):
            a search given the question's text can be hybrid.
    """

    quantized: bool = False
    scan_points: int = 0
    leaf_vector: bool = False
    summary_vector: bool = False
    sparse: bool = False

    def vector_for(self, flt: SearchFilter) -> str:
        """Return the vector (graph) a search with ``flt`` walks in this store."""
        return search_vector(flt, leaf_vector=self.leaf_vector, summary_vector=self.summary_vector)


def scan_points(full_scan_kb: int, dim: int) -> int:
    """Return the points below which the engine scans: Qdrant's conversion of the KB threshold."""
    return full_scan_kb * 1024 // (dim * _BYTES_PER_DIM) if dim > 0 else 0


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """How one query runs: a float ``exact`` scan, the engine's quantized ``scan``, or an HNSW
    walk of breadth ``hnsw_ef``; ``oversampling`` set: rescore that many candidates per hit.

    A ``scan`` plan also carries the walk's ``hnsw_ef``: the engine decides per segment from its
    own estimate, so should it walk after all, it walks as broadly as the planner would have.
    """

    exact: bool
    hnsw_ef: int | None
    matches: int | None  # the estimate the plan was made from (None: not estimated)
    oversampling: float | None = None
    scan: bool = False

    @property
    def label(self) -> str:
        """``exact``, ``scan`` or ``ef=N``: what the plan does, for reports and benchmarks."""
        if self.exact:
            return "exact"
        return "scan" if self.scan else f"ef={self.hnsw_ef}"


@dataclass(frozen=True, slots=True)
class Planner:
    """The knobs of :meth:`plan`; the defaults are the ones measured by ``bench/query.py``.

    Args:
        exact_max_points: Scan exactly when at most this many points match (0: never).
        hnsw_ef: Breadth of an unfiltered walk; ``None`` uses :data:`BASE_HNSW_EF`.
        max_hnsw_ef: Cap on the breadth the selectivity rule asks for (times the factor of
            a walk of the leaves' or the summaries' own graph).
        oversampling: Candidates per hit scored on a quantized store's int8 copy, rescored.
        leaves_exact_max_points: Scan leaves-only filters exactly up to this many matching
            points (see :data:`LEAVES_EXACT_MAX_POINTS`).
    """

    exact_max_points: int = EXACT_MAX_POINTS
    hnsw_ef: int | None = None
    max_hnsw_ef: int = MAX_HNSW_EF
    oversampling: float = OVERSAMPLING
    leaves_exact_max_points: int = LEAVES_EXACT_MAX_POINTS

    def __post_init__(self) -> None:
        if self.exact_max_points < 0:
            raise ValueError(f"exact_max_points must be >= 0, got {self.exact_max_points}")
        if self.hnsw_ef is not None and self.hnsw_ef < 1:
            raise ValueError(f"hnsw_ef must be >= 1 (or None for the default), got {self.hnsw_ef}")
        if self.max_hnsw_ef < 1:
            raise ValueError(f"max_hnsw_ef must be >= 1, got {self.max_hnsw_ef}")
        if not self.oversampling >= 1.0:
            raise ValueError(f"oversampling must be >= 1.0, got {self.oversampling}")

    def plan_filter(
        self, flt: SearchFilter, matches: int, total: int, limit: int, index: StoreIndex
    ) -> SearchPlan:
        """Return :meth:`plan` for a search with ``flt`` (its layer band said from the filter)."""
        return self.plan(
            matches,
            total,
            limit,
            index,
            leaves_only=flt.leaves_only,
            summaries_only=flt.summaries_only,
            restricted=flt.readable is not None,
        )

    def plan(
        self,
        matches: int,
        total: int,
        limit: int,
        index: StoreIndex | None = None,
        *,
        leaves_only: bool = False,
        summaries_only: bool = False,
        restricted: bool = False,
    ) -> SearchPlan:
        """Return the plan for a query whose filter keeps ``matches`` of ``total`` points.

        ``total``: the points of the graph the walk would run on: every point, or the leaves
        (summaries) where a leaves-only (summaries-only) filter walks their own graph.
        ``index`` describes the store (``None``: no int8 copy, so scans are float ``exact``);
        ``leaves_only``: the filter keeps no summary (scanned up to ``leaves_exact_max_points``
        in a store without the leaves' own graph); ``summaries_only``: it keeps no leaf (walked
        more broadly in the summaries' own graph).
        """
        index = index if index is not None else StoreIndex()
        base = self.hnsw_ef if self.hnsw_ef is not None else BASE_HNSW_EF
        factor, growth = 1.0, MATCHES_GROWTH
        if leaves_only and index.leaf_vector:
            factor, growth = LEAF_WALK_EF_FACTOR, LEAF_MATCHES_GROWTH
        elif summaries_only and index.summary_vector:
            factor = SUMMARY_WALK_EF_FACTOR
        if restricted:  # a reader filter drops whole folders' regions of the graph
            factor *= ACCESS_WALK_EF_FACTOR
        base, cap = round(base * factor), round(self.max_hnsw_ef * factor)
        ef = hnsw_ef_for(matches, total, limit, base=base, cap=max(cap, base), growth=growth)
        rescore = self.oversampling if index.quantized else None
        scan_max = self.exact_max_points
        if leaves_only and total > 0 and not index.leaf_vector:
            scan_max = max(scan_max, self.leaves_exact_max_points)
        if matches <= scan_max:
            if index.quantized and matches < index.scan_points:
                return SearchPlan(False, ef, matches, oversampling=rescore, scan=True)
            return SearchPlan(exact=True, hnsw_ef=None, matches=matches)
        return SearchPlan(exact=False, hnsw_ef=ef, matches=matches, oversampling=rescore)


def retry_exact(plan: SearchPlan, limit: int, hits: int) -> SearchPlan | None:
    """Return the exact plan to ask again with if a walk came back short, else None.

    A filtered walk only steps through points that pass the filter; where the query lands among
    points the filter rejects, the walk can be cut off from the rest and return far fewer hits
    than asked for, and poor ones (bench/query.py, 100k nodes, the 60 % tree filter: one query
    in 200 got 1 hit of score 0.14 where 60k points matched and the best scored 0.45, at any
    ``hnsw_ef`` up to 2000). Fewer hits than ``min(limit, matches)`` is that failure's mark: a
    walk that was not cut off returns ``limit`` hits when the filter keeps that many. The exact
    scan of the same filter is right; it is rare, so its cost does not matter.
    """
    if plan.exact or plan.scan or plan.matches is None or hits >= min(limit, plan.matches):
        return None
    return SearchPlan(exact=True, hnsw_ef=None, matches=plan.matches)


def search_planned(
    plan: SearchPlan, limit: int, run: Callable[[SearchPlan], list[_Hit]]
) -> list[_Hit]:
    """Return ``run(plan)``, or the exact scan's hits when that walk came back cut off
    (:func:`retry_exact`): each adapter's ``run`` sends one planned query to its engine."""
    hits = run(plan)
    again = retry_exact(plan, limit, len(hits))
    if again is None:
        return hits
    log.debug("the walk returned %d of %d hits; scanning exactly", len(hits), limit)
    return run(again)


def first_hits(limit: int, max_tokens: int) -> int:
    """Return how many hits ``search_budget`` asks the engine for first.

    The greedy fill stops at the first node that does not fit, so a 2000-token budget uses
    ~10-20 of the 100 hits ``candidate_limit`` asks for; the engine's cost grows with the limit
    (rescoring ``OVERSAMPLING x limit`` candidates, ``ef >= limit``): 100k nodes, the 60 % walk
    1.31 -> 1.04 ms, the 9 % folder scan 2.03 -> 1.57 ms at 32 instead of 100. Only when every
    first hit fits does the adapter ask again for ``limit`` hits (and the fill starts over).
    """
    return min(limit, max(FIRST_HITS_MIN, max_tokens // FIRST_HITS_TOKENS + 1))


def hnsw_ef_for(
    matches: int, total: int, limit: int, *, base: int, cap: int, growth: float = MATCHES_GROWTH
) -> int:
    """Return the walk breadth for a filter keeping ``matches`` of the ``total`` points of the
    graph walked.

    ``base / sqrt(selectivity)``: the walk drops the points the filter rejects, so it keeps a
    comparable number of useful candidates as the filter narrows; times
    ``(matches / MATCHES_AT_BASE_EF) ** growth`` past that many matches (see
    :data:`MATCHES_AT_BASE_EF`, :data:`MATCHES_GROWTH`, :data:`LEAF_MATCHES_GROWTH`); never below
    ``limit`` (the engine needs ``ef >= limit`` to return ``limit`` hits) nor above ``cap``.
    """
    selectivity = min(1.0, matches / total) if total > 0 else 1.0
    many = math.pow(max(1.0, matches / MATCHES_AT_BASE_EF), growth)
    wanted = math.ceil(base * many / math.sqrt(max(selectivity, 1e-6)))
    return max(limit, min(wanted, cap))
