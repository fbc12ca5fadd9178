"""The search planner: a scan under a cardinality threshold (the engine's int8 scan on a quantized
store, a float exact scan otherwise), a widening HNSW walk above it."""

from __future__ import annotations

import math

import pytest

from retriever.plan import (
    BASE_HNSW_EF,
    EXACT_MAX_POINTS,
    FULL_SCAN_KB,
    LEAF_WALK_EF_FACTOR,
    MATCHES_AT_BASE_EF,
    MATCHES_GROWTH,
    MAX_HNSW_EF,
    OVERSAMPLING,
    SUMMARY_WALK_EF_FACTOR,
    HnswConfig,
    Planner,
    SearchPlan,
    StoreIndex,
    first_hits,
    hnsw_ef_for,
    scan_points,
)


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


def test_a_walk_among_more_matching_points_is_broader() -> None:
    """Recall at a fixed breadth falls as the points to pick from grow (1M nodes, 60 % filter:
    0.92 at the 100k breadth, 0.942-0.951 at its square root's 405, 0.962 at 800): past
    MATCHES_AT_BASE_EF matches the walk widens by their MATCHES_GROWTH power; a narrow filter in
    a big store (a folder) keeps the breadth of its selectivity."""
    planner = Planner(exact_max_points=0, max_hnsw_ef=10_000)
    assert planner.plan(60_000, 100_000, 100).hnsw_ef == 166  # the breadth measured at 100k
    # 128 / sqrt(0.6) * (600k / 100k) ** 0.9
    assert planner.plan(600_000, 1_000_000, 100).hnsw_ef == math.ceil(128 / math.sqrt(0.6) * 6**0.9)
    assert MATCHES_GROWTH == 0.9
    four = planner.plan(MATCHES_AT_BASE_EF * 4, 10**7, 100).hnsw_ef
    assert four == math.ceil(128 * 5 * 4**0.9)
    folder = planner.plan(88_000, 1_000_000, 100).hnsw_ef
    assert folder == planner.plan(8_800, 100_000, 100).hnsw_ef == 432
    assert Planner(exact_max_points=0).plan(600_000, 1_000_000, 100).hnsw_ef == 829 < MAX_HNSW_EF
    assert Planner(exact_max_points=0).plan(9 * 10**6, 10**7, 100).hnsw_ef == MAX_HNSW_EF


def test_a_summaries_only_walk_of_their_own_graph_is_broader() -> None:
    """Summaries' top 100 are many near-equal siblings: 0.86 at the base breadth at 1M nodes."""
    planner = Planner()
    own = StoreIndex(quantized=True, scan_points=12_000, summary_vector=True)
    walked = planner.plan(100_000, 170_000, 100, own, summaries_only=True)
    assert walked.hnsw_ef == math.ceil(
        round(SUMMARY_WALK_EF_FACTOR * BASE_HNSW_EF) / math.sqrt(100_000 / 170_000)
    )
    assert walked.hnsw_ef >= 600  # 1M nodes: 0.945 at 500, 0.959 at 600 (a third build)
    assert walked.hnsw_ef > planner.plan(100_000, 170_000, 100, own).hnsw_ef
    older = StoreIndex(quantized=True, scan_points=12_000)  # no summary graph: every node's
    assert planner.plan(100_000, 1_000_000, 100, older, summaries_only=True).hnsw_ef == 405
    assert planner.plan(5_000, 170_000, 100, own, summaries_only=True).scan


def test_a_quantized_store_scans_its_int8_copy_and_rescores_everything() -> None:
    planner = Planner(exact_max_points=500)
    index = StoreIndex(quantized=True, scan_points=1000)
    scan = planner.plan(500, 10_000, 100, index)
    assert (scan.scan, scan.exact, scan.oversampling) == (True, False, OVERSAMPLING)
    assert scan.hnsw_ef is not None
    assert scan.hnsw_ef >= 100  # should the engine walk after all
    assert scan.label == "scan"
    walk = planner.plan(501, 10_000, 100, index)
    assert (walk.scan, walk.exact, walk.oversampling) == (False, False, OVERSAMPLING)
    assert walk.label == f"ef={walk.hnsw_ef}"
    unquantized = planner.plan(501, 10_000, 100)
    assert unquantized.oversampling is None  # nothing to rescore
    assert planner.plan(500, 10_000, 100).label == "exact"


def test_a_quantized_store_whose_engine_would_walk_gets_a_float_exact_scan() -> None:
    """An older store's engine scans only below Qdrant's default threshold (6,666 points at
    384-d): between it and the planner's threshold ``exact`` is the only way to scan, and it
    ignores the int8 copy."""
    index = StoreIndex(quantized=True, scan_points=scan_points(FULL_SCAN_KB, 384))
    assert index.scan_points == 6666
    assert Planner().plan(6665, 100_000, 100, index).scan
    plan = Planner().plan(6666, 100_000, 100, index)
    assert plan == SearchPlan(exact=True, hnsw_ef=None, matches=6666)


def test_new_stores_scan_up_to_the_planner_threshold() -> None:
    for dim in (16, 384, 768, 1536):
        index = HnswConfig().index_of(dim)
        assert index.quantized
        assert EXACT_MAX_POINTS < index.scan_points < EXACT_MAX_POINTS * 1.01  # KB rounding
        assert Planner().plan(EXACT_MAX_POINTS, 10**6, 100, index).scan
    assert HnswConfig().scan_kb(384) == 18_002  # Qdrant's threshold is in KB of float vectors
    assert HnswConfig(full_scan_kb=300).scan_kb(384) == 300
    assert not HnswConfig(quantize=False).index_of(384).quantized


@pytest.mark.parametrize(
    "kwargs",
    [{"exact_max_points": -1}, {"hnsw_ef": 0}, {"max_hnsw_ef": 0}, {"oversampling": 0.5}],
)
def test_planner_rejects_bad_knobs(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Planner(**kwargs)


def test_hnsw_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="m must be >= 1, got 0"):
        HnswConfig(m=0)
    with pytest.raises(ValueError, match="indexing_kb"):
        HnswConfig(indexing_kb=0)


def test_a_leaves_only_filter_is_scanned_exactly_where_a_walk_would_miss() -> None:
    """A summary is the hub of its children in the graph: a walk that may not step through
    summaries found 17-46 % of the true top 100 at 100k nodes (bench/query.py, tree+leaves)."""
    from retriever.plan import LEAVES_EXACT_MAX_POINTS, Planner, StoreIndex
    from retriever.schema import Kind, SearchFilter

    planner = Planner()
    index = StoreIndex(quantized=True, scan_points=12_000)
    assert not planner.plan(50_000, 100_000, 100, index).exact  # any other filter: walked
    leaves = planner.plan(50_000, 100_000, 100, index, leaves_only=True)
    assert leaves.exact
    assert leaves.label == "exact"
    small = planner.plan(5_000, 100_000, 100, index, leaves_only=True)
    assert small.scan, "few leaves: the engine's quantized scan, rescored"
    huge = planner.plan(500_000, 1_000_005, 100, index, leaves_only=True)
    assert huge.exact, "1M nodes: the walk found 22 % of the top 100 leaves; scanned instead"
    bounded = Planner(leaves_exact_max_points=100_000)
    assert not bounded.plan(500_000, 1_000_005, 100, index, leaves_only=True).exact
    assert LEAVES_EXACT_MAX_POINTS > 10**9
    own = StoreIndex(quantized=True, scan_points=12_000, leaf_vector=True)  # the leaves' graph
    walked = planner.plan(50_000, 100_000, 100, own, leaves_only=True)
    wider = hnsw_ef_for(
        50_000, 100_000, 100, base=round(LEAF_WALK_EF_FACTOR * BASE_HNSW_EF), cap=MAX_HNSW_EF
    )
    assert walked.hnsw_ef == wider > planner.plan(50_000, 100_000, 100, own).hnsw_ef
    assert not walked.exact
    assert not walked.scan
    assert planner.plan(5_000, 100_000, 100, own, leaves_only=True).scan
    # Past 100k leaves the leaves' walk grows faster than they do: at 1M nodes (500k of 830k
    # leaves) ef=1011 found 0.925 of the top 100, 2021 found 0.956; in another build 2000 found
    # 0.939, 3000 0.958.
    million = planner.plan(500_000, 830_000, 100, own, leaves_only=True).hnsw_ef
    assert million is not None
    assert 3000 <= million <= round(MAX_HNSW_EF * LEAF_WALK_EF_FACTOR)
    assert planner.plan(500_000, 830_000, 100, own).hnsw_ef <= MAX_HNSW_EF  # others: as before
    assert SearchFilter(tree="t", max_layer=0).leaves_only
    assert SearchFilter(tree="t", kind=Kind.CHUNK).leaves_only
    assert not SearchFilter(tree="t", min_layer=1).leaves_only
    assert not SearchFilter(tree="t").leaves_only
    assert SearchFilter(tree="t", min_layer=1).summaries_only
    assert SearchFilter(tree="t", min_layer=2, max_layer=3).summaries_only
    assert SearchFilter(tree="t", kind=Kind.SUMMARY).summaries_only
    assert not SearchFilter(tree="t", min_layer=0).summaries_only
    assert not SearchFilter(tree="t", max_layer=2).summaries_only


def test_search_budget_first_asks_for_what_the_budget_can_take_and_walks_as_broadly() -> None:
    assert first_hits(100, 2000) == 32  # 2000 tokens of 64-token nodes, +1 that does not fit
    assert first_hits(100, 55) == 16  # never below one payload batch
    assert first_hits(10, 2000) == 10  # never above the limit
    assert first_hits(400, 8000) == 126
    index = StoreIndex(quantized=True, scan_points=12_001)
    for matches in (60_000, 20_000):  # the first, smaller query walks the same breadth
        full = Planner().plan(matches, 100_000, 100, index)
        assert Planner().plan(matches, 100_000, first_hits(100, 2000), index) == full
