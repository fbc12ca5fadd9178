"""The change log: one record per commit, written with it, read back by time and by reader."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from ingestor.errors import TreeError
from ingestor.pipeline.reconcile import Pipeline
from ingestor.tree import changelog
from ingestor.tree.changelog import ChangeRecord, FileChange, Retention, SummaryChange
from ingestor.tree.persist import load_state, state_path
from models_store import Changes, ModelStore, ModelStoreError, RowStore
from testkit.corpus import doc_text, make_pipeline


def _rows(tmp: Path) -> RowStore:
    return RowStore(state_path(ModelStore(tmp / "state" / "models"), "t"), readonly=True)


def _write(root: Path, name: str, rng: random.Random, n: int = 12) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc_text(rng, n))
    return path


def _built(tmp_path: Path, seed: int, files: int) -> tuple[Pipeline, Path, random.Random]:
    """A pipeline that built ``files`` documents ``d0.txt``...; its folder and random source."""
    rng = random.Random(seed)
    root = tmp_path / "docs"
    for i in range(files):
        _write(root, f"d{i}.txt", rng)
    pipe = make_pipeline(tmp_path)
    pipe.build(root)
    return pipe, root, rng


def test_every_commit_records_what_it_changed(tmp_path: Path) -> None:
    pipe, root, rng = _built(tmp_path, 3, 6)
    built = changelog.read(_rows(tmp_path))
    assert [r["kind"] for r in built] == ["build"]
    assert sorted(f["source"] for f in built[0]["files"]) == [f"d{i}.txt" for i in range(6)]
    assert {f["action"] for f in built[0]["files"]} == {"added"}
    assert built[0]["summaries"], "a build lists the summaries it wrote"

    new = _write(root, "new.txt", rng)
    edited = _write(root, "d1.txt", rng)
    (root / "d2.txt").unlink()
    before = time.time()
    pipe.update([new, edited, root / "d2.txt"])
    records = changelog.read(_rows(tmp_path))
    assert [r["kind"] for r in records] == ["update", "build"]  # newest first
    update = ChangeRecord.from_json(records[0])
    assert update.at >= before - 1
    actions = {f.source: f.action for f in update.files}
    assert actions == {"new.txt": "added", "d1.txt": "edited", "d2.txt": "removed"}
    assert update.leaves_added > 0
    assert update.leaves_removed > 0
    owner = next(f.owner for f in update.files if f.source == "new.txt")
    assert owner is not None  # the account owning the file
    state = load_state(pipe.context.models, "t")
    assert state is not None
    for s in update.summaries:  # the summaries named are in the tree, written by it
        node = state.nodes.peek(s.node_id)
        assert node is not None
        assert node.layer == s.layer
        assert node.updated_at >= update.at


def test_since_and_limit_read_by_time(tmp_path: Path) -> None:
    rows = RowStore(tmp_path / "s.db", create=True)
    for gen, at in enumerate([100.0, 200.0, 300.0, 400.0], start=1):
        ch = Changes()
        changelog.gather([ChangeRecord(at=at, kind="update")], gen, ch)
        rows.commit(ch)
    assert [r["at"] for r in changelog.read(rows, since=200.0)] == [400.0, 300.0, 200.0]
    assert [r["at"] for r in changelog.read(rows, since=150.0, until=350.0)] == [300.0, 200.0]
    assert [r["at"] for r in changelog.read(rows, limit=1)] == [400.0]
    assert changelog.prune(rows, Retention(10, 1), now=300.0 + 86400) == 2
    assert [r["at"] for r in changelog.read(rows)] == [400.0, 300.0]
    assert changelog.prune(rows, Retention(1, 0)) == 1
    assert [r["at"] for r in changelog.read(rows)] == [400.0]


def test_a_reader_sees_only_files_and_summaries_of_classes_they_may_read(tmp_path: Path) -> None:
    rows = RowStore(tmp_path / "s.db", create=True)
    ch = Changes()
    records = [
        ChangeRecord(
            at=float(i),
            kind="update",
            files=[
                FileChange(f"hr/{i}.txt", "added", "hr"),
                FileChange(f"pub/{i}.txt", "edited", "pub"),
            ],
            summaries=[
                SummaryChange("s-hr", 1, ("hr", "pub")),
                SummaryChange("s-pub", 1, ("pub",)),
            ],
            leaves_added=7,
        )
        for i in range(1, 4)
    ] + [ChangeRecord(at=9.0, kind="update", files=[FileChange("hr/x.txt", "removed", "hr")])]
    changelog.gather(records, 1, ch)
    rows.commit(ch)
    seen = changelog.read(rows, readable=frozenset({"pub"}))
    assert [r["at"] for r in seen] == [3.0, 2.0, 1.0]  # the record of hr files only is not shown
    for r in seen:
        assert [f["source"] for f in r["files"]] == [f"pub/{int(r['at'])}.txt"]
        assert [s["node_id"] for s in r["summaries"]] == ["s-pub"]  # a summary over hr text: hidden
        assert "leaves_added" not in r  # counts would tell of hidden files
    everything = changelog.read(rows)
    assert len(everything) == 4
    assert everything[1]["leaves_added"] == 7
    assert len(changelog.read(rows, readable=frozenset({"pub"}), limit=2)) == 2
    assert changelog.read(rows, readable=frozenset()) == []


def test_a_move_is_told_to_each_reader_as_they_saw_it(tmp_path: Path) -> None:
    rows = RowStore(tmp_path / "s.db", create=True)
    ch = Changes()
    moves = [
        FileChange("pub/a.txt", "moved", "pub", "alice", "hr/pay-cuts.txt", "hr"),
        FileChange("hr/b.txt", "moved", "hr", "alice", "pub/b.txt", "pub"),
        FileChange("pub/c2.txt", "moved", "pub", "alice", "pub/c.txt", "pub"),
    ]
    changelog.gather([ChangeRecord(at=1.0, kind="update", files=moves)], 1, ch)
    rows.commit(ch)

    def files(readable: frozenset[str] | None) -> list[tuple[str, str, str | None]]:
        (record,) = changelog.read(rows, readable=readable)
        return [(f["source"], f["action"], f.get("from")) for f in record["files"]]

    assert files(None) == [
        ("pub/a.txt", "moved", "hr/pay-cuts.txt"),
        ("hr/b.txt", "moved", "pub/b.txt"),
        ("pub/c2.txt", "moved", "pub/c.txt"),
    ]
    # a public reader: the file out of hr/ appeared (its hr/ name untold), b.txt left their sight
    assert files(frozenset({"pub"})) == [
        ("pub/a.txt", "added", None),
        ("pub/b.txt", "removed", None),
        ("pub/c2.txt", "moved", "pub/c.txt"),
    ]
    assert files(frozenset({"hr"})) == [
        ("hr/pay-cuts.txt", "removed", None),
        ("hr/b.txt", "added", None),
    ]
    (public,) = changelog.read(rows, readable=frozenset({"pub"}))
    assert "hr/pay-cuts.txt" not in json.dumps(public)
    assert ChangeRecord.from_json(changelog.read(rows)[0]).files == moves


def test_a_failed_commit_writes_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipe, root, rng = _built(tmp_path, 5, 5)
    real = RowStore.commit

    def fail_the_update(self: RowStore, ch: Changes, **kw: Any) -> int:
        if any(ns == changelog.NS for ns, _ in ch.put):
            raise ModelStoreError("disk full (test)")
        return real(self, ch, **kw)

    monkeypatch.setattr(RowStore, "commit", fail_the_update)
    with pytest.raises(TreeError, match="disk full"):
        pipe.update([_write(root, "new.txt", rng)])
    monkeypatch.undo()
    assert [r["kind"] for r in changelog.read(_rows(tmp_path))] == ["build"]
    pipe.update([_write(root, "other.txt", rng)])  # one record: the failed one is not carried
    records = changelog.read(_rows(tmp_path))
    assert [r["kind"] for r in records] == ["update", "build"]
    assert {f["source"] for f in records[0]["files"]} <= {"new.txt", "other.txt"}


def test_records_are_plain_json(tmp_path: Path) -> None:
    """Any tool can read the log (sqlite3 and a JSON parser): nothing pickled."""
    _built(tmp_path, 7, 5)
    ((key, value),) = _rows(tmp_path).items_range(changelog.NS)
    body = json.loads(value)
    assert body["kind"] == "build"
    assert len(body["files"]) == 5
    assert key.split(".")[0].isdigit()


def test_a_file_saved_again_and_again_is_one_record(tmp_path: Path) -> None:
    """An autosaved document (or a log appended to) made one record a save: 80 in 40 s for a file
    written twice a second, drowning `adrap changes` and the rest of the log's history."""
    pipe, root, rng = _built(tmp_path, 4, 4)
    saves = []
    for n in range(5):
        saves.append(time.time())
        pipe.update([_write(root, "d1.txt", rng, 12 + n)])
    records = changelog.read(_rows(tmp_path))
    assert [r["kind"] for r in records] == ["update", "build"]
    merged = ChangeRecord.from_json(records[0])
    assert merged.updates == 5
    assert saves[0] - 1 <= merged.first_at <= saves[1]
    assert merged.at >= saves[-1] - 1
    assert [(f.source, f.action) for f in merged.files] == [("d1.txt", "edited")]
    assert merged.leaves_added >= 5

    pipe.update([_write(root, "d2.txt", rng)])  # another file: a record of its own
    pipe.update([_write(root, "d1.txt", rng)])  # and the first again: not merged across it
    kinds = [
        (r["files"][0]["source"], r.get("updates", 1)) for r in changelog.read(_rows(tmp_path))
    ]
    assert kinds[:3] == [("d1.txt", 1), ("d2.txt", 1), ("d1.txt", 5)]
    seen = changelog.read(_rows(tmp_path), readable=frozenset({merged.files[0].access}))
    assert seen[2]["updates"] == 5
    assert seen[2]["first_at"] == merged.first_at


def test_only_updates_that_edit_the_same_files_in_time_are_merged(tmp_path: Path) -> None:
    rows = RowStore(tmp_path / "s.db", create=True)

    def edit(at: float, *names: str, action: str = "edited", kind: str = "update") -> None:
        ch = Changes()
        files = [FileChange(n, action, "c1") for n in names]  # type: ignore[arg-type]
        record = ChangeRecord(at=at, kind=kind, files=files, leaves_added=1)  # type: ignore[arg-type]
        changelog.gather([record], int(at), ch, rows)
        rows.commit(ch)

    edit(100.0, "a")
    edit(110.0, "a")
    edit(120.0, "a", "b")  # more files
    edit(130.0, "a", "b")
    edit(130.0 + changelog.MERGE_SECONDS + 1, "a", "b")  # too late
    edit(2000.0, "a", "b", action="added")
    edit(2001.0, "a", "b", kind="refresh")
    for at in range(10_000, 14_500, 500):  # saved every 500 s: a record spans an hour at most
        edit(float(at), "c")
    spans = [(r.get("first_at"), r["at"], r.get("updates")) for r in changelog.read(rows, limit=2)]
    assert spans == [(None, 14_000.0, None), (10_000.0, 13_500.0, 8)]
    got = [(r["at"], r.get("updates", 1), r["leaves_added"]) for r in changelog.read(rows)][2:]
    assert got == [
        (2001.0, 1, 1),
        (2000.0, 1, 1),
        (130.0 + changelog.MERGE_SECONDS + 1, 1, 1),
        (130.0, 2, 2),
        (110.0, 2, 2),
    ]
    assert [r.get("first_at") for r in changelog.read(rows)][5:] == [120.0, 100.0]
