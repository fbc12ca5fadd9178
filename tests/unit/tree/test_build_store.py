"""A build writes the node store in bulk: one index build at the end, not one per upsert batch."""

from __future__ import annotations

import random
from pathlib import Path

from tests.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import doc_text, make_pipeline


def test_a_build_indexes_the_embedded_store_once_and_restores_auto_optimize(
    tmp_path: Path,
) -> None:
    """Each optimize that finds work merges every segment (the whole graph again), and the
    engine keeps the merged-away segments until a flush: optimizing every
    ``auto_optimize_points`` of a build cost a 265k-leaf build 13 merges and 6.9 GB of
    segments. The build optimizes once, after its last upsert, and updates afterwards optimize
    as configured."""
    rng = random.Random(3)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(40):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 10)))
    p = make_pipeline(tmp_path, EchoSummarizer())
    store = p.store
    store.auto_optimize_points = 20  # type: ignore[attr-defined]
    calls: list[int] = []
    optimize = store.optimize

    def counting() -> bool:
        calls.append(1)
        return optimize()

    store.optimize = counting  # type: ignore[method-assign]
    report = p.build(root)
    assert report.leaves > 3 * 20, "the build must write many auto-optimize batches"
    assert len(calls) == 1, f"the build optimized {len(calls)} times, expected once at its end"
    assert store.auto_optimize_points == 20  # type: ignore[attr-defined]

    (root / "late.txt").write_text(doc_text(rng, 60))
    p.update([root / "late.txt"])
    # A store this small is never indexed, so every upsert of the update finds 20+ unindexed.
    assert len(calls) > 1, "an update past auto_optimize_points optimizes as before"
    p.store.close()
