"""A moved or renamed file keeps its place in the tree: its leaves take their new ids where the
old ones were, and no summary is written again (issue 55: a tree kept for years is reorganised).

Real TreeClusterer, qdrant-edge and state database; hashed embeddings and echo summaries.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from ingestor.pipeline import Pipeline
from ingestor.service.watcher import make_observer
from ingestor.tree import changelog
from ingestor.tree.invariants import violations
from ingestor.tree.persist import state_path
from ingestor.tree.state import TreeState
from models_store import ModelStore, RowStore
from retriever import SearchFilter
from testkit.corpus import doc_text, make_pipeline
from testkit.daemons import make_watcher, watched_move
from testkit.fakes import CountingEmbedder, EchoSummarizer
from tests.conftest import wait_until


def _built(tmp_path: Path) -> tuple[Pipeline, EchoSummarizer, Path]:
    rng = random.Random(7)
    root = tmp_path / "share"
    for folder in ("team", "notes", "old"):
        (root / folder).mkdir(parents=True)
        for i in range(12):
            (root / folder / f"d{i}.txt").write_text(doc_text(rng, 8))
    summ = EchoSummarizer()
    p = make_pipeline(tmp_path, summ)
    p.build(root)
    assert p.require_state().layers, "the test needs a tree with summaries"
    return p, summ, root


def _rows(tmp_path: Path) -> RowStore:
    return RowStore(state_path(ModelStore(tmp_path / "state" / "models"), "t"), readonly=True)


def _shape(state: TreeState) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each summary's text and its children's texts: the tree, whatever the leaves are called."""
    out = {}
    for nid, node in state.nodes.items():
        if node.layer >= 1:
            kids = tuple(sorted(state.nodes[c].text for c in node.children))
            out[nid] = (node.text, kids)
    return out


def _leaf_parents(state: TreeState, source: str) -> list[tuple[str, ...]]:
    return [tuple(state.nodes[i].parents) for i in state.sources[source].node_ids]


def _store_matches_state(p: Pipeline) -> None:
    state = p.require_state()
    store = p.context.store
    stored = set(store.iter_ids("t"))
    assert stored == set(state.nodes), "store and state hold different nodes"
    ids = sorted(state.nodes)
    got = {n.node_id: n.model_dump() for n in store.retrieve(ids)}
    want = {n.node_id: n.model_dump() for n in state.payloads(ids)}
    assert got == want, "a stored payload differs from the state's"


def test_a_moved_folder_keeps_its_summaries_and_places(tmp_path: Path) -> None:
    p, summ, root = _built(tmp_path)
    before = p.require_state()
    shape = _shape(before)
    parents = {f"old/d{i}.txt": _leaf_parents(before, f"old/d{i}.txt") for i in range(12)}
    (root / "old").rename(root / "archive")
    emb = p.context.embedder
    assert isinstance(emb, CountingEmbedder)
    emb.texts.clear()
    calls = summ.calls

    report = p.reconcile(root)

    state = p.require_state()
    assert (report.files_added, report.files_removed, report.files_moved) == (0, 0, 12)
    assert summ.calls == calls, "a move wrote summaries again"
    assert emb.texts == [], "a move embedded text again"
    assert _shape(state) == shape, "the tree above the moved leaves changed"
    for i in range(12):
        assert _leaf_parents(state, f"archive/d{i}.txt") == parents[f"old/d{i}.txt"]
        assert f"old/d{i}.txt" not in state.sources
    assert violations(state) == []
    _store_matches_state(p)
    (record,) = changelog.read(_rows(tmp_path), limit=1)
    moved = {f["from"]: f["source"] for f in record["files"] if f["action"] == "moved"}
    assert moved == {f"old/d{i}.txt": f"archive/d{i}.txt" for i in range(12)}
    assert len(record["files"]) == 12, "a move is recorded once, not as a removal and an add"
    hits = p.context.store.search(
        emb.embed_query("orchard apples"), SearchFilter(tree="t", source_prefix="archive/"), 50
    )
    assert hits
    assert all(h.node.source is None or h.node.source.startswith("archive/") for h in hits)
    tops = [n for n in state.nodes.values() if n.layer == len(state.layers)]
    assert any("archive/" in (n.dirs or ()) or n.dirs_capped for n in tops)
    assert not any("old/" in (n.dirs or ()) for n in state.nodes.values())


def test_a_moved_then_edited_file_is_placed_again(tmp_path: Path) -> None:
    """A file moved and edited in one batch is not the same text: its leaves are removed and
    the new ones placed as any new file's (and the tree stays sound)."""
    p, _summ, root = _built(tmp_path)
    (root / "team" / "d0.txt").rename(root / "notes" / "moved.txt")
    with (root / "notes" / "moved.txt").open("a") as fh:
        fh.write(" A new closing sentence about glaciers and valleys.")
    emb = p.context.embedder
    assert isinstance(emb, CountingEmbedder)
    emb.texts.clear()
    p.reconcile(root)
    state = p.require_state()
    assert "notes/moved.txt" in state.sources
    assert "team/d0.txt" not in state.sources
    assert violations(state) == []
    _store_matches_state(p)


def test_a_renamed_copy_moves_one_file_and_places_the_other(tmp_path: Path) -> None:
    """Two new files with the text of one removed file: one takes the removed file's place, the
    other is placed as a new file."""
    p, _summ, root = _built(tmp_path)
    parents = _leaf_parents(p.require_state(), "team/d1.txt")
    text = (root / "team" / "d1.txt").read_text()
    (root / "team" / "d1.txt").rename(root / "notes" / "one.txt")
    (root / "notes" / "two.txt").write_text(text)
    emb = p.context.embedder
    assert isinstance(emb, CountingEmbedder)
    emb.texts.clear()
    p.reconcile(root)
    state = p.require_state()
    assert {"notes/one.txt", "notes/two.txt"} <= set(state.sources)
    assert parents in (_leaf_parents(state, "notes/one.txt"), _leaf_parents(state, "notes/two.txt"))
    leaf_texts = [state.nodes[i].text for i in state.sources["notes/two.txt"].node_ids]
    assert sum(t in leaf_texts for t in emb.texts) <= len(leaf_texts), "both were embedded"
    assert violations(state) == []
    _store_matches_state(p)


def test_the_daemon_moves_a_renamed_folder_in_one_batch_without_summaries(tmp_path: Path) -> None:
    """The watcher gets a folder's rename as one event: both ends go into one batch, so the
    folder's files are moved, not removed and added again."""
    p, summ, root = _built(tmp_path)
    shape = _shape(p.require_state())
    w = make_watcher(p, p.require_state(), root, debounce=0.05)
    calls = summ.calls
    report = watched_move(w, root / "old", root / "archive")
    assert (report.files_added, report.files_removed) == (0, 0)
    assert report.files_moved == 12
    assert ", 12 moved" in report.summary()
    assert summ.calls == calls, "a folder's rename wrote summaries again"
    state = p.require_state()
    assert _shape(state) == shape
    assert violations(state) == []
    _store_matches_state(p)


def test_adding_only_the_new_place_of_a_move_moves_the_files(tmp_path: Path) -> None:
    """``adrap add archive`` after ``mv old archive``: the old place is found (same text, gone
    from the share), so the files keep their places and the old names leave the tree, instead of
    staying there, cited by answers, until ``adrap remove old``."""
    p, summ, root = _built(tmp_path)
    shape = _shape(p.require_state())
    (root / "old").rename(root / "archive")
    (root / "team" / "d3.txt").rename(root / "notes" / "d3-moved.txt")
    calls = summ.calls

    report = p.update([root / "archive", root / "notes" / "d3-moved.txt"])

    state = p.require_state()
    assert (report.files_added, report.files_removed, report.files_moved) == (0, 0, 13)
    assert not any(s.startswith("old/") for s in state.sources), "the old names stayed"
    assert "team/d3.txt" not in state.sources
    assert summ.calls == calls, "a move wrote summaries again"
    assert _shape(state) == shape
    assert violations(state) == []
    _store_matches_state(p)


def test_adding_a_copy_keeps_the_original(tmp_path: Path) -> None:
    """A copy's original is still there: nothing is removed, and the copy is added."""
    p, _summ, root = _built(tmp_path)
    shutil.copytree(root / "old", root / "copy")
    report = p.update([root / "copy"])
    state = p.require_state()
    assert (report.files_added, report.files_removed, report.files_moved) == (12, 0, 0)
    assert all(f"old/d{i}.txt" in state.sources for i in range(12))
    assert violations(state) == []
    _store_matches_state(p)


def test_a_file_whose_folder_cannot_be_listed_is_not_taken_as_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a file that is gone is removed: an indexed twin whose folder cannot be listed now
    (a flaky mount) is kept, and the new file is added beside it."""
    p, _summ, root = _built(tmp_path)
    shutil.copy(root / "old" / "d0.txt", root / "notes" / "twin.txt")
    real = os.listdir

    def flaky(path: Any = ".") -> list[str]:
        if Path(path) == root / "old":
            raise OSError(errno.EIO, "Input/output error")
        return real(path)

    monkeypatch.setattr("ingestor.read.listing.os.listdir", flaky)
    (root / "old" / "d0.txt").unlink()  # gone, but its folder's listing fails: not proven
    report = p.update([root / "notes" / "twin.txt"])
    monkeypatch.undo()
    state = p.require_state()
    assert (report.files_added, report.files_moved) == (1, 0)
    assert "old/d0.txt" in state.sources
    assert violations(state) == []


@pytest.mark.parametrize("where", ["before the commit", "between the commit and the deletes"])
def test_a_move_killed_mid_update_ends_with_store_and_state_agreeing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Killed after its upserts (parents listing the new ids) and before the commit, the tree is
    the one before the move and the next update moves the files; killed after the commit, the
    next update deletes the old leaves' points."""
    p, summ, root = _built(tmp_path)
    generation = p.require_state().generation

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt(f"killed {where}")

    if where == "before the commit":
        monkeypatch.setattr("ingestor.pipeline.context.commit_state", crash)
    else:
        monkeypatch.setattr(p.context.store, "delete", crash)
    (root / "old").rename(root / "archive")
    with pytest.raises(KeyboardInterrupt):
        p.update([root / "old", root / "archive"])
    monkeypatch.undo()
    state = p.require_state()
    committed = state.generation > generation
    assert committed == (where != "before the commit")
    calls = summ.calls
    p.update([root / "old", root / "archive"])
    state = p.require_state()
    assert sorted(s for s in state.sources if s.startswith("archive/")) == sorted(
        f"archive/d{i}.txt" for i in range(12)
    )
    assert summ.calls == calls, "the move, done again or finished, wrote summaries"
    assert violations(state) == []
    _store_matches_state(p)


@pytest.mark.parametrize("polling", [False, True], ids=["native", "polling"])
def test_a_folder_renamed_under_a_real_observer_is_moved(tmp_path: Path, polling: bool) -> None:
    """``mv`` of a folder under the daemon's own observers (inotify, and the polling one of
    network shares) reaches the update as both ends at once: moved, no summary written."""
    p, summ, root = _built(tmp_path)
    shape = _shape(p.require_state())
    w = make_watcher(p, p.require_state(), root, debounce=0.2)
    observer = make_observer(polling=polling, interval=0.2)
    observer.schedule(w.handler, str(root), recursive=True)
    observer.start()
    w.start()
    calls = summ.calls
    try:
        (root / "old").rename(root / "archive")
        wait_until(lambda: "archive/d0.txt" in p.require_state().sources)
    finally:
        observer.stop()
        observer.join()
        w.stop(timeout=30)
    state = p.require_state()
    assert not any(s.startswith("old/") for s in state.sources)
    assert summ.calls == calls, "the rename wrote summaries again"
    assert _shape(state) == shape
    _store_matches_state(p)
