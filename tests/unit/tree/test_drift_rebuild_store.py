"""A drift rebuild inside an update writes the node store in bulk, as ``adrap rebuild`` does."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline


def test_a_drift_rebuild_in_an_update_indexes_the_embedded_store_once(tmp_path: Path) -> None:
    """The drift-rebuild path of ``adrap add``/``remove`` rewrites every node of the tree; without
    bulk writes the embedded store optimized (merged every segment) once per auto-optimize batch
    of that rewrite (15 times at a scaled-down threshold, against 1 in ``adrap rebuild``)."""
    rng = random.Random(5)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(30):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 10)))
    # Any update is a drift rebuild; count its writes only, not the new leaves' early upsert.
    p = make_pipeline(tmp_path, EchoSummarizer(), drift=0.01, leaves_first=False)
    p.build(root)
    store = p.context.store
    store.auto_optimize_points = 20  # type: ignore[attr-defined]
    calls: list[int] = []
    optimize = store.optimize

    def counting() -> bool:
        calls.append(1)
        return optimize()

    store.optimize = counting  # type: ignore[method-assign]
    (root / "late.txt").write_text(doc_text(rng, 8))
    report = p.update([root / "late.txt"])
    assert report.rebuilt, "the update must take the drift-rebuild path"
    assert len(p.require_state().nodes) > 3 * 20, "the rebuild must write many optimize batches"
    assert len(calls) <= 1, f"the drift rebuild optimized {len(calls)} times, expected at most once"
    assert store.auto_optimize_points == 20  # type: ignore[attr-defined]
    store.close()


def test_a_tree_past_the_rebuild_bound_is_placed_by_adrap_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the drift threshold, a tree of more leaves than ``rebuild_max_leaves`` is not rebuilt
    (a rebuild of a large tree is hours, every summary paid again): adRAP places the leaves and
    the report and the log say to run ``adrap rebuild``; a smaller tree is still rebuilt."""
    rng = random.Random(6)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(30):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 10)))
    for bound, rebuilt in ((5, False), (100_000, True)):
        p = make_pipeline(
            tmp_path / str(bound), EchoSummarizer(), drift=0.01, rebuild_max_leaves=bound
        )
        p.build(root)
        (root / f"late{bound}.txt").write_text(doc_text(rng, 8))
        with caplog.at_level("WARNING"):
            report = p.update([root / f"late{bound}.txt"])
        assert report.rebuilt is rebuilt
        assert (report.drift_past is None) is rebuilt
        if rebuilt:  # the line says why: the drift and the bound that let it rebuild
            assert "full rebuild (drift " in report.summary(), report.summary()
            assert "ADRAP_ADRAP__DRIFT_THRESHOLD 0.01" in report.summary()
        if not rebuilt:
            assert report.stats.leaves_added > 0  # placed by adRAP
            assert "adrap rebuild" in report.summary()
            assert "ADRAP_ADRAP__REBUILD_MAX_LEAVES" in caplog.text
            check_invariants(p)
        p.context.store.close()


def test_the_first_build_of_a_watched_folder_is_not_called_a_drift(tmp_path: Path) -> None:
    """The daemon's first pass over a folder with no tree builds it: its line says so (it said
    "full rebuild (drift)", which sent a new user looking for a drift that was never there)."""
    rng = random.Random(7)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(12):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 10)))
    report = make_pipeline(tmp_path, EchoSummarizer()).reconcile(root)
    assert report.rebuilt
    assert "full rebuild (first build)" in report.summary(), report.summary()
    assert "drift" not in report.summary()
    # what its summaries read is counted, as for any update (it said 0 input tokens)
    assert report.stats.summaries_regenerated > 0
    assert report.stats.summary_input_tokens > 0, report.summary()
