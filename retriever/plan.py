"""Search planning for one filtered query: an exact scan of the matching points, or an HNSW walk.

Both adapters plan the same way and send the plan as search parameters (``exact`` / ``hnsw_ef``),
so the embedded engine and a Qdrant server behave alike.

Why plan at all: a filtered HNSW walk only steps through points that pass the filter, so the
fewer points a filter keeps, the more the graph restricted to them falls apart and the more true
neighbours the walk misses (bench/query.py, 100k nodes, m=32: recall@100 0.97 at a 60 % filter,
0.84 at a 10 % layer filter, both at ef=128). An exact scan is always right and costs in proportion
to the points it scores (~0.25 us per matching point on qdrant-edge, 2.4 ms for 10k: filter check
plus a random-access vector read), whereas the walk costs about the same whatever the filter keeps
(~1 ms at ef=128). Up to :data:`EXACT_MAX_POINTS` matching points the scan costs about what a walk
wide enough for recall >= 0.95 under such a filter costs, and is exact; above, the walk runs with
a breadth that grows as the filter gets more selective (:func:`hnsw_ef_for`).

The number of matching points comes from the payload indexes' cardinality estimate (a count with
``exact=False``: tens of microseconds on the embedded engine, no point is read), or is bounded by
``len(ids)`` for an id filter without asking the engine at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

#: At most this many (estimated) matching points: scan them exactly instead of walking the graph.
EXACT_MAX_POINTS: Final = 12_000
#: HNSW breadth of an unfiltered search (also the floor for filtered ones); never below ``limit``.
BASE_HNSW_EF: Final = 128
#: Upper bound of the breadth the planner asks for (the walk's cost grows about linearly in it).
MAX_HNSW_EF: Final = 512
#: HNSW graph built by both adapters: links per point (32: recall@100 0.97 at ef=128 under a 60 %
#: filter on the 100k bench, against 0.90 with 16) and build breadth.
HNSW_M: Final = 32
HNSW_EF_CONSTRUCT: Final = 128
#: The engine's own plain-search threshold, in KB of vectors (Qdrant's default).
FULL_SCAN_KB: Final = 10_000


@dataclass(frozen=True, slots=True)
class HnswConfig:
    """The HNSW graph a new store is created with (an existing store keeps its own).

    Args:
        m: Links per point (more: better-connected graph under filters, slower build).
        ef_construct: Build breadth (more: better graph, slower build).
        full_scan_kb: Below this many KB of matching vectors the engine itself scans instead of
            walking the graph (per segment); the :class:`Planner` decides first in any case.
        indexing_kb: A segment gets a graph once it holds this many KB of vectors (``None``:
            the engine's default, 10 MB); small stores are scanned, which is exact and fast.
    """

    m: int = HNSW_M
    ef_construct: int = HNSW_EF_CONSTRUCT
    full_scan_kb: int = FULL_SCAN_KB
    indexing_kb: int | None = None

    def __post_init__(self) -> None:
        for name in ("m", "ef_construct", "full_scan_kb", "indexing_kb"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"HNSW {name} must be >= 1, got {value}")


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """How one query runs: ``exact`` scan, or an HNSW walk of breadth ``hnsw_ef``."""

    exact: bool
    hnsw_ef: int | None
    matches: int | None  # the estimate the plan was made from (None: not estimated)


@dataclass(frozen=True, slots=True)
class Planner:
    """The knobs of :meth:`plan`; the defaults are the ones measured by ``bench/query.py``.

    Args:
        exact_max_points: Scan exactly when at most this many points match (0: never).
        hnsw_ef: Breadth of an unfiltered walk; ``None`` uses :data:`BASE_HNSW_EF`.
        max_hnsw_ef: Cap on the breadth the selectivity rule asks for.
    """

    exact_max_points: int = EXACT_MAX_POINTS
    hnsw_ef: int | None = None
    max_hnsw_ef: int = MAX_HNSW_EF

    def __post_init__(self) -> None:
        if self.exact_max_points < 0:
            raise ValueError(f"exact_max_points must be >= 0, got {self.exact_max_points}")
        if self.hnsw_ef is not None and self.hnsw_ef < 1:
            raise ValueError(f"hnsw_ef must be >= 1 (or None for the default), got {self.hnsw_ef}")
        if self.max_hnsw_ef < 1:
            raise ValueError(f"max_hnsw_ef must be >= 1, got {self.max_hnsw_ef}")

    def plan(self, matches: int, total: int, limit: int) -> SearchPlan:
        """Return the plan for a query whose filter keeps ``matches`` of ``total`` points."""
        if matches <= self.exact_max_points:
            return SearchPlan(exact=True, hnsw_ef=None, matches=matches)
        base = self.hnsw_ef if self.hnsw_ef is not None else BASE_HNSW_EF
        ef = hnsw_ef_for(matches, total, limit, base=base, cap=max(self.max_hnsw_ef, base))
        return SearchPlan(exact=False, hnsw_ef=ef, matches=matches)


def hnsw_ef_for(matches: int, total: int, limit: int, *, base: int, cap: int) -> int:
    """Return the walk breadth for a filter keeping ``matches`` of ``total`` points.

    ``base / sqrt(selectivity)``: the walk drops the points the filter rejects, so it keeps a
    comparable number of useful candidates as the filter narrows; never below ``limit`` (the
    engine needs ``ef >= limit`` to return ``limit`` hits) nor above ``cap``.
    """
    selectivity = min(1.0, matches / total) if total > 0 else 1.0
    wanted = math.ceil(base / math.sqrt(max(selectivity, 1e-6)))
    return max(limit, min(wanted, cap))
