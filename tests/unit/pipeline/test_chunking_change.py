"""A change of ``ADRAP_CHUNK__*`` chunks every file of the tree again, once: the files the tree
chunked another way are read again at the next reconcile (or update of them) and placed as edits,
instead of keeping their old leaves beside new files chunked the new way."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ingestor.pipeline import Pipeline
from ingestor.pipeline import build as build_stage
from ingestor.tree.invariants import violations
from testkit.corpus import doc_text, make_pipeline


def _share(tmp_path: Path) -> Path:
    rng = random.Random(5)
    root = tmp_path / "docs"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
        for i in range(5):
            (root / folder / f"d{i}.txt").write_text(doc_text(rng, 12))
    return root


def _largest_leaf(p: Pipeline) -> int:
    return max(n.n_tokens for n in p.require_state().nodes.values() if n.layer == 0)


def test_a_new_chunk_size_chunks_every_file_again_once_and_back(tmp_path: Path) -> None:
    root = _share(tmp_path)
    built = make_pipeline(tmp_path, chunk_tokens=40)
    built.build(root)
    assert _largest_leaf(built) > 24
    built.context.store.close()

    small = make_pipeline(tmp_path, chunk_tokens=24)
    report = small.reconcile(root)
    assert report.files_changed == 10, "every file chunked the old way is read and placed again"
    assert _largest_leaf(small) <= 24
    assert violations(small.require_state()) == []
    assert small.reconcile(root).files_changed == 0, "chunked again once, not at every pass"
    new = root / "a" / "new.txt"
    new.write_text(doc_text(random.Random(9), 12))
    small.update([new])
    assert _largest_leaf(small) <= 24
    small.context.store.close()

    back = make_pipeline(tmp_path, chunk_tokens=40)
    assert back.reconcile(root).files_changed == 11, "the tree's own size again: all again"
    assert back.reconcile(root).files_changed == 0
    assert violations(back.require_state()) == []
    back.context.store.close()


def test_a_tree_made_before_chunking_was_recorded_is_taken_as_chunked_as_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade embeds nothing again: a state that names no chunking is taken as chunked with
    the settings in force when it is first updated, and recorded so from then on."""
    root = _share(tmp_path)
    monkeypatch.setattr(build_stage, "CHUNKER_PARAM", "unrecorded")  # as an older build wrote
    old = make_pipeline(tmp_path, chunk_tokens=40)
    old.build(root)
    old.context.store.close()
    monkeypatch.undo()
    upgraded = make_pipeline(tmp_path, chunk_tokens=24)
    assert upgraded.reconcile(root).files_changed == 0
    assert upgraded.require_state().params["chunker"] == "24/8"
    upgraded.context.store.close()
    changed = make_pipeline(tmp_path, chunk_tokens=40)
    assert changed.reconcile(root).files_changed == 10, "recorded now: a later change counts"
    changed.context.store.close()
