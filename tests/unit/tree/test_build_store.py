"""A build writes the node store in bulk: one index build at the end, not one per upsert batch."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingestor.pipeline import Pipeline, context
from ingestor.tree.persist import checkpoint_path, fill_pending, state_path
from testkit.fakes import EchoSummarizer
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
    store = p.context.store
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
    p.context.store.close()


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
    assert p.context.store.retrieve(ids) == state.payloads(ids)


def test_a_first_build_writes_each_point_once_after_committing_its_tree(tmp_path: Path) -> None:
    """A first build keeps its vectors in its checkpoint and writes the store only once its
    tree is committed and let go (the engine's points and the builder's tree never in memory
    together: 1M leaves ~12 GiB otherwise): no upsert before the commit, each node once."""
    root = _folder(tmp_path)
    p = make_pipeline(tmp_path, EchoSummarizer())
    upserted: list[str] = []
    early: list[str] = []
    upsert = p.context.store.upsert

    def counting_upsert(nodes: Any, vectors: Any) -> None:
        ids = [n.node_id for n in nodes]
        if not state_path(p.context.models, "t").exists():
            early.extend(ids)
        upserted.extend(ids)
        upsert(nodes, vectors)

    p.context.store.upsert = counting_upsert  # type: ignore[method-assign]
    held: list[int] = []
    commit = p.context.commit

    def noting_commit(state: Any, **kw: Any) -> None:
        held.append(len(state.vectors))
        commit(state, **kw)

    p.context.commit = noting_commit  # type: ignore[method-assign]
    p.build(root)
    assert held == [0], "the vectors are in the checkpoint: the commit is made without them"
    state = p.require_state()
    assert len(state.ids_in_layer(0)) > 40
    assert len(state.layer_counts()) > 1
    assert early == [], "points written before the tree was committed"
    assert sorted(upserted) == sorted(state.nodes), "every node upserted exactly once"
    assert not fill_pending(state)
    assert not checkpoint_path(p.context.models, "t").exists()
    _stored_as_in_state(p)
    p.context.store.close()


class _Killed(Exception):
    """Stands for a kill -9 while the store is written."""


def _killed_in_its_fill(tmp: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> Pipeline:
    """Build ``root`` into ``tmp`` and kill the build after the first batch of points its fill
    writes (batches of 16); return its pipeline, the store closed."""
    p = make_pipeline(tmp, EchoSummarizer())
    upsert, calls = p.context.store.upsert, []

    def dying_upsert(nodes: Any, vectors: Any) -> None:
        calls.append(1)
        if len(calls) > 1:
            raise _Killed
        upsert(nodes, vectors)

    p.context.store.upsert = dying_upsert  # type: ignore[method-assign]
    monkeypatch.setattr(context, "UPSERT_BATCH", 16)
    with pytest.raises(_Killed):
        p.build(root)
    p.context.store.close()
    return p


def test_a_first_build_killed_while_writing_its_points_is_finished_by_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after its commit, half-way through its points: the tree is committed with its
    store unfinished; the next writer to open it writes the rest from the checkpoint's
    vectors (nothing embedded again) and deletes the checkpoint. Same points, vectors
    included, as an uninterrupted build."""
    root = _folder(tmp_path / "ref")
    ref = make_pipeline(tmp_path / "ref", EchoSummarizer())
    ref.build(root)
    want = ref.require_state()
    ids = sorted(want.nodes)
    want_vectors = ref.context.store.retrieve_vectors(ids)
    ref.context.store.close()

    p = _killed_in_its_fill(tmp_path / "run", root, monkeypatch)
    assert checkpoint_path(p.context.models, "t").exists()
    half = make_pipeline(tmp_path / "run", EchoSummarizer())
    assert fill_pending(half.require_state())
    assert 0 < len(list(half.context.store.iter_ids("t"))) < len(ids)

    embedded: list[str] = []
    embed = half.context.embedder.embed_documents

    def counting_embed(texts: Any) -> Any:
        embedded.extend(texts)
        return embed(texts)

    half.context.embedder.embed_documents = counting_embed  # type: ignore[method-assign]
    state = half.open_state(recover=True)
    assert state is not None
    assert not fill_pending(state)
    assert embedded == [], "recovery took every vector from the checkpoint"
    assert not checkpoint_path(half.context.models, "t").exists()
    assert sorted(state.nodes) == ids
    _stored_as_in_state(half)
    np.testing.assert_array_equal(half.context.store.retrieve_vectors(ids), want_vectors)
    half.context.store.close()


def test_a_point_an_older_interrupted_build_left_is_written_over(tmp_path: Path) -> None:
    """A point an interrupted build of an older version stored (same id: same source and text)
    may say its chunk sits elsewhere in the file: the build writes it whole again."""
    root = _folder(tmp_path / "a")
    first = make_pipeline(tmp_path / "a", EchoSummarizer())
    first.build(root)
    state = first.require_state()
    leaf = state.ids_in_layer(0)[3]
    old = state.payloads([leaf])[0].model_copy(
        update={"char_start": 999_999, "char_end": 1_000_000, "parents": ()}
    )
    vector = state.matrix([leaf])
    first.context.store.close()

    p = make_pipeline(tmp_path / "b", EchoSummarizer())
    p.context.store.ensure_collection(vector.shape[1], p.context.embedder.model_id)
    p.context.store.upsert([old], vector)  # what the interrupted build left
    p.build(root)
    _stored_as_in_state(p)
    assert p.context.store.retrieve([leaf])[0].char_start != 999_999
    p.context.store.close()


def test_a_fill_whose_checkpoint_is_unreadable_embeds_the_texts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damaged checkpoint does not leave a committed tree half stored: recovery reads what the
    store has and embeds the rest again."""
    root = _folder(tmp_path)
    p = _killed_in_its_fill(tmp_path, root, monkeypatch)
    checkpoint_path(p.context.models, "t").write_bytes(b"not a database" * 100)

    again = make_pipeline(tmp_path, EchoSummarizer())
    state = again.open_state(recover=True)
    assert state is not None
    assert not fill_pending(state)
    _stored_as_in_state(again)
    again.context.store.close()
