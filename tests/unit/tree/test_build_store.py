"""A build writes the node store in bulk: one index build at the end, not one per upsert batch."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ingestor.pipeline import Pipeline
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


def _folder(tmp_path: Path, files: int = 30) -> Path:
    tmp_path.mkdir(exist_ok=True)
    rng = random.Random(5)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(files):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 10)))
    return root


def _stored_as_in_state(p: Pipeline) -> None:
    state = p.require_state()
    ids = list(state.nodes)
    assert p.store.retrieve(ids) == state.payloads(ids)


def test_a_first_build_writes_each_leaf_once_then_only_its_parents(tmp_path: Path) -> None:
    """The leaves are stored as they are embedded (a killed build resumes from them), before
    their clusters exist; the store stage writes only their parents (265k leaves: ~30x less
    work than upserting every leaf again), and the points end as the state says."""
    root = _folder(tmp_path)
    p = make_pipeline(tmp_path, EchoSummarizer())
    upserted: list[str] = []
    given: dict[str, list[str]] = {}
    upsert, set_parents = p.store.upsert, p.store.set_parents

    def counting_upsert(nodes: Any, vectors: Any) -> None:
        upserted.extend(n.node_id for n in nodes)
        upsert(nodes, vectors)

    def counting_parents(parents: Any) -> None:
        given.update(parents)
        set_parents(parents)

    p.store.upsert = counting_upsert  # type: ignore[method-assign]
    p.store.set_parents = counting_parents  # type: ignore[method-assign]
    p.build(root)
    state = p.require_state()
    leaves = state.ids_in_layer(0)
    assert len(leaves) > 40
    assert len(state.layer_counts()) > 1
    assert sorted(upserted) == sorted(state.nodes), "every node upserted exactly once"
    assert sorted(given) == sorted(leaves)
    _stored_as_in_state(p)
    p.store.close()


def test_leaves_taken_back_from_an_interrupted_build_are_written_whole(tmp_path: Path) -> None:
    """A leaf whose point an interrupted build stored keeps its vector, but its chunk may sit
    elsewhere in the file now (same text, same id): it is upserted again, not only parented."""
    root = _folder(tmp_path / "a")
    first = make_pipeline(tmp_path / "a", EchoSummarizer())
    first.build(root)
    state = first.require_state()
    leaf = state.ids_in_layer(0)[3]
    old = state.payloads([leaf])[0].model_copy(
        update={"char_start": 999_999, "char_end": 1_000_000, "parents": ()}
    )
    vector = state.matrix([leaf])
    first.store.close()

    p = make_pipeline(tmp_path / "b", EchoSummarizer())
    p.store.ensure_collection(vector.shape[1], p.embedder.model_id)
    p.store.upsert([old], vector)  # what the interrupted build left
    p.build(root)
    _stored_as_in_state(p)
    assert p.store.retrieve([leaf])[0].char_start != 999_999
    p.store.close()
