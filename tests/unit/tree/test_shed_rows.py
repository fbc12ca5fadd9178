"""A state held across updates (the daemon's) drops the rows it holds in memory past a bound
(ingestor.tree.persist.shed_rows), and evolves exactly as one that holds them all."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from ingestor.pipeline import Pipeline, UpdateReport
from ingestor.tree.persist import RECENT_UPDATES, held_rows, pending_intent, shed_rows
from ingestor.tree.rowmap import Clock, RowMap
from ingestor.tree.state import TreeState
from ingestor.tree.vector_map import VectorMap
from models_store import Changes, RowStore
from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline, write_corpus
from tests.unit.tree.test_persist_refit import clusters


def apply(p: Pipeline, held: TreeState, paths: list[Path]) -> None:
    """One update of ``paths`` on the state ``held``, as the daemon's watcher applies a batch."""
    report = UpdateReport()
    docs, gone = p.collect(held, paths, report)
    p.apply_batch(held, docs, gone, report)


def snapshot(held: TreeState) -> tuple[object, ...]:
    nodes = {i: (n.layer, n.parents, n.children, n.text) for i, n in held.nodes.items()}
    return nodes, [clusters(layer) for layer in held.layers]


def random_edits(root: Path, rng: random.Random, step: int) -> list[Path]:
    docs = sorted(root.glob("*.txt"))
    gone, edited = docs[step % len(docs)], docs[(step + 3) % len(docs)]
    gone.unlink()
    edited.write_text(doc_text(rng, rng.randint(4, 10)))
    made = [root / f"n{step}_{i}.txt" for i in range(rng.randint(1, 3))]
    for f in made:
        f.write_text(doc_text(rng, rng.randint(4, 10)))
    return [gone, edited, *made]


@pytest.mark.parametrize("drift", [100.0, 0.05], ids=["adrap", "after-a-rebuild"])
@pytest.mark.parametrize("bound", [0, 150], ids=["drop-all", "drop-unused"])
def test_a_held_state_that_drops_its_rows_evolves_as_one_that_keeps_them(
    tmp_path: Path, drift: float, bound: int
) -> None:
    # Two copies of one tree, updated alike; one drops the rows it holds past a bound after
    # each update (0: all of them; 150: those the update did not use, then all if still past).
    # With drift 0.05 the first update rebuilds the layers in the held state: their rows are
    # then the ones this process wrote, read back after a drop (the id counter a group's model
    # shares with its layer, a local UMAP's index data, must be linked again).
    runs = []
    for name, limit in (("keep", None), ("drop", bound)):
        root = tmp_path / name / "docs"
        write_corpus(root, random.Random(1), 24)
        p = make_pipeline(tmp_path / name, EchoSummarizer(), drift=drift)
        p.build(root)
        runs.append((p, root, p.require_state(), limit, random.Random(2)))
    for step in range(8):
        for p, root, held, limit, rng in runs:
            apply(p, held, random_edits(root, rng, step))
            if step == 0:
                # One rebuild at most, then adRAP carries the rest: a change of setting
                # mid-run, made where the setting lives.
                p.apply_stage.drift_threshold = 100.0
            if limit is not None:
                assert held_rows(held) > limit
                assert shed_rows(held, limit) > 0
                assert held_rows(held) <= limit
        keep, drop = runs
        assert snapshot(drop[2]) == snapshot(keep[2]), f"step {step}"
        shed_rows(drop[2], 0)  # what the snapshot read: the next update starts with nothing held
    for p, *_ in runs:
        check_invariants(p)


def held_tree(
    tmp_path: Path, n_docs: int, drift: float = 100.0
) -> tuple[Pipeline, Path, TreeState]:
    """A built tree and its state opened to be held across updates."""
    root = tmp_path / "docs"
    write_corpus(root, random.Random(1), n_docs)
    p = make_pipeline(tmp_path, EchoSummarizer(), drift=drift)
    p.build(root)
    return p, root, p.require_state()


def test_a_drift_rebuild_closes_the_intent_of_the_leaves_it_showed_first(tmp_path: Path) -> None:
    p, root, held = held_tree(tmp_path, 12, drift=0.05)
    apply(p, held, random_edits(root, random.Random(2), 0))
    assert held.generation > 1
    assert not held.intent_open
    assert pending_intent(held) is None


def test_nothing_is_dropped_below_the_bound_or_with_writes_pending(tmp_path: Path) -> None:
    p, root, held = held_tree(tmp_path, 12)
    apply(p, held, random_edits(root, random.Random(2), 0))
    n = held_rows(held)
    assert n > 0
    assert shed_rows(held, n) == 0  # at the bound: kept
    some = next(iter(held.nodes.keys_with_prefix("")))
    held.nodes.edit(some)  # taken to change: written back at the next commit, so not droppable
    assert held.nodes.shed() == 0
    assert held.sources.shed() > 0  # each mapping on its own


def test_past_the_bound_the_rows_recent_updates_used_are_kept(tmp_path: Path) -> None:
    p, root, held = held_tree(tmp_path, 24)
    names = ["d3.txt"] + [f"d{10 + i}.txt" for i in range(RECENT_UPDATES)]
    for i, name in enumerate(names):
        (root / name).write_text(doc_text(random.Random(i), 6))
        apply(p, held, [root / name])
        n = held_rows(held)
        if name != names[-1]:
            assert shed_rows(held, n) == 0  # at the bound: nothing dropped
    assert held.sources.holds("d3.txt")
    assert shed_rows(held, n - 1) > 0
    assert 0 < held_rows(held) < n
    assert all(held.sources.holds(name) for name in names[1:])  # the last 8 updates'
    assert not held.sources.holds("d3.txt")  # used 9 updates ago
    assert held.sources["d3.txt"].node_ids  # read again


def test_a_rowmap_drops_only_what_the_database_holds(tmp_path: Path) -> None:
    rows = RowStore.shared(tmp_path / "s.sqlite", create=True)
    m: RowMap[int] = RowMap("ns", Clock())
    m["a"], m["b"] = 1, 2
    assert m.shed() == 0  # not bound: the only copy
    ch = Changes()
    m.replace_all()
    m.changes(ch)
    rows.commit(ch, stamp=1)
    m.bind(rows)
    assert (m["a"], m["b"], m.held()) == (1, 2, 2)
    m["c"] = 3
    assert m.shed() == 0  # "c" is not in the database yet
    ch = Changes()
    m.changes(ch)
    rows.commit(ch, stamp=2)
    m.committed()
    assert m.shed() == 3
    assert m.held() == 0
    assert dict(m.items()) == {"a": 1, "b": 2, "c": 3}  # read again


def test_the_clock_of_use_forgets_deleted_rows_and_vectors(tmp_path: Path) -> None:
    # A daemon deletes rows at every update: their stamps must go with them, or the bookkeeping
    # meant to bound its memory grows with every row it ever deleted.
    rows = RowStore.shared(tmp_path / "s.sqlite", create=True)
    m: RowMap[int] = RowMap("ns", Clock())
    m.bind(rows)
    vectors = VectorMap(m.clock)
    vectors.fetch = lambda ids: np.zeros((len(ids), 2), dtype=np.float32)
    for i in range(50):
        m[f"k{i}"] = i
        del m[f"k{i}"]
        vectors[f"v{i}"] = np.zeros(2, dtype=np.float32)
        vectors.pop(f"v{i}")
    vectors.prefetch(["gone"])
    del vectors["gone"]
    assert m._used == {}
    assert vectors._used == {}
