"""The search planner: exact scan under a cardinality threshold, a widening HNSW walk above it."""

from __future__ import annotations

import pytest

from retriever.plan import BASE_HNSW_EF, EXACT_MAX_POINTS, HnswConfig, Planner, SearchPlan


def test_planner_scans_exactly_at_or_under_the_threshold() -> None:
    planner = Planner(exact_max_points=500)
    assert planner.plan(0, 10_000, 100) == SearchPlan(exact=True, hnsw_ef=None, matches=0)
    assert planner.plan(500, 10_000, 100).exact
    assert not planner.plan(501, 10_000, 100).exact
    assert Planner().plan(EXACT_MAX_POINTS, 10**6, 100).exact
    assert not Planner(exact_max_points=0).plan(1, 10**6, 100).exact


def test_planner_widens_the_walk_as_the_filter_narrows_within_bounds() -> None:
    planner = Planner(exact_max_points=0, hnsw_ef=100, max_hnsw_ef=400)
    efs = [planner.plan(m, 100_000, 10).hnsw_ef or 0 for m in (100_000, 60_000, 10_000, 1_000)]
    assert efs[0] == 100  # unfiltered: the base breadth
    assert efs == sorted(efs)
    assert efs[1] > 100
    assert efs[-1] == 400  # capped
    assert planner.plan(100_000, 100_000, 300).hnsw_ef == 300  # never below the limit
    assert Planner(exact_max_points=0).plan(5, 5, 1).hnsw_ef == BASE_HNSW_EF


@pytest.mark.parametrize("kwargs", [{"exact_max_points": -1}, {"hnsw_ef": 0}, {"max_hnsw_ef": 0}])
def test_planner_rejects_bad_knobs(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Planner(**kwargs)


def test_hnsw_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="m must be >= 1, got 0"):
        HnswConfig(m=0)
    with pytest.raises(ValueError, match="indexing_kb"):
        HnswConfig(indexing_kb=0)
