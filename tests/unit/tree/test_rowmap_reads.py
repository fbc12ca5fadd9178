"""A stored tree is read in batches: a prefetch answers later lookups, found or not, so an update
issues a handful of queries per layer instead of one per node (~2,000 an add at 26k leaves)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from ingestor.tree.row_containers import KeyedRowMap
from ingestor.tree.rowmap import Clock, RowMap, dumps
from models_store import Changes, RowStore
from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, make_pipeline, write_corpus


class CountingRows(RowStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path, create=True)
        self.single = 0
        self.many = 0

    def get(self, ns: str, key: str) -> bytes | None:
        self.single += 1
        return super().get(ns, key)

    def get_many(self, ns: str, keys):  # type: ignore[no-untyped-def]
        self.many += 1
        return super().get_many(ns, keys)


def stored(tmp_path: Path) -> CountingRows:
    rows = CountingRows(tmp_path / "s.db")
    ch = Changes()
    for i in range(10):
        ch.set("m", str(i), dumps(i * i))
        ch.set("p", f"0/{i}", dumps(f"n{i}"))
    rows.commit(ch)
    return rows


def test_a_prefetch_answers_later_reads_of_found_and_missing_keys(tmp_path: Path) -> None:
    rows = stored(tmp_path)
    m: RowMap[int] = RowMap("m", Clock())
    m.bind(rows)
    m.prefetch(["1", "2", "nope", "also-missing"])
    assert rows.many == 1
    assert m.peek("2") == 4
    assert "nope" not in m
    assert m.get("also-missing") is None
    assert rows.single == 0, "no row read one by one after the prefetch"
    m.prefetch(["1", "nope", "also-missing"])  # all known: found, or found missing
    assert rows.many == 1, "a second prefetch of known keys asked the database again"
    m["nope"] = 7  # a key found missing can still be set, and is then there
    assert m["nope"] == 7
    assert "3" in m  # not prefetched: read on its own
    assert rows.single == 1


def test_a_scan_yields_every_value_once_and_keeps_none(tmp_path: Path) -> None:
    """``scan`` reads a namespace too big to hold: the stored rows one at a time (none cached),
    this process's unsaved values instead of the stored ones, deleted keys left out."""
    rows = stored(tmp_path)
    m: RowMap[int] = RowMap("m", Clock())
    m.bind(rows)
    m["3"] = -3  # unsaved change of a stored key
    m["new"] = 7  # unsaved new key
    del m["4"]
    got = dict(m.scan())
    want = {str(i): i * i for i in range(10) if i != 4} | {"3": -3, "new": 7}
    assert got == want
    assert sum(1 for _ in m.scan()) == len(want), "each key once"
    assert set(m._cache) <= {"3", "new"}, "stored rows were kept"


def test_keyed_maps_prefetch_their_encoded_keys(tmp_path: Path) -> None:
    rows = stored(tmp_path)
    inner: RowMap[str] = RowMap("p", Clock())
    inner.bind(rows)
    at: KeyedRowMap[tuple[int, int], str] = KeyedRowMap(inner, "pair")
    at.prefetch([(0, i) for i in range(10)])
    assert [at[(0, i)] for i in range(10)] == [f"n{i}" for i in range(10)]
    assert (rows.many, rows.single) == (1, 0)


def test_removing_a_file_or_folder_reads_no_whole_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sources of a vanished path come from one key lookup or one range scan (a pass over
    every source cost 0.47 s of a one-document remove at 200k leaves)."""
    rng = random.Random(2)
    root = tmp_path / "docs"
    write_corpus(root, rng, 12)
    write_corpus(root / "sub", rng, 3)
    p = make_pipeline(tmp_path, EchoSummarizer())
    try:
        p.build(root)
        p.require_state()
        whole: list[str] = []
        items = RowStore.items

        def counting(self: RowStore, ns: str):  # type: ignore[no-untyped-def]
            whole.append(ns)
            return items(self, ns)

        monkeypatch.setattr(RowStore, "items", counting)
        (root / "d3.txt").unlink()
        report = p.update([root / "d3.txt"])
        assert report.stats.leaves_removed > 0
        shutil.rmtree(root / "sub")
        p.update([root / "sub"])
        p.update([root / "d4.txt"], remove=True)  # `adrap remove`
        # Only the top clustered layer's own maps may be read whole (Algorithm 1's condition
        # over the top: the cost of the top layers, not of the tree).
        top = f"L{len(p.require_state().layers) - 1}."
        assert [ns for ns in whole if not ns.startswith(top)] == [], whole
        monkeypatch.undo()
        sources = set(p.require_state().sources)
        assert "d3.txt" not in sources
        assert "d4.txt" not in sources
        assert not any(s.startswith("sub/") for s in sources)
        assert "d5.txt" in sources
        check_invariants(p)
    finally:
        p.context.store.close()


def clusterer_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the namespace of every clusterer row read from now on."""
    reads: list[str] = []
    get = RowStore.get

    def counting(self: RowStore, ns: str, key: str) -> bytes | None:
        if key == "clusterer":
            reads.append(ns)
        return get(self, ns, key)

    monkeypatch.setattr(RowStore, "get", counting)
    return reads


def test_a_layer_clusterer_is_read_once_per_content_and_never_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon opens the state for every update; the clusterer row (~18 MB at 200k leaves) is
    read again only when its content changed (a new token), and each open unpickles its own
    copy, so a change made by an update that never commits is not seen by the next open."""
    rng = random.Random(4)
    root = tmp_path / "docs"
    write_corpus(root, rng, 16)
    p = make_pipeline(tmp_path, EchoSummarizer())
    try:
        p.build(root)
        token = p.require_state().layers[0].clusterer_token
        reads = clusterer_reads(monkeypatch)
        first = p.require_state().layers[0]
        first.clusterer.changed_in_place = True  # an update's change, never committed
        again = p.require_state().layers[0]
        assert reads == [], "the committed bytes were kept by the build's commit"
        assert not hasattr(again.clusterer, "changed_in_place")
        assert again.clusterer_token == token
        p.rebuild()  # layers refitted: new clusterers, new tokens
        fresh = p.require_state().layers[0]
        assert fresh.clusterer_token != token
        assert reads == []
        from ingestor.tree import layer_store

        layer_store._HEADS.clear()  # another process: nothing kept
        p.require_state()
        assert "L0.head" in reads
    finally:
        p.context.store.close()


def test_a_layer_stored_without_a_token_is_read_once_then_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree committed before clusterer tokens existed gets one on its next commit: its
    clusterer bytes are read by the first open only, not by every update's open after it."""
    from ingestor.tree import layer_store
    from ingestor.tree.rowmap import loads

    rng = random.Random(5)
    root = tmp_path / "docs"
    write_corpus(root, rng, 16)
    p = make_pipeline(tmp_path, EchoSummarizer())
    try:
        p.build(root)
        rows = p.require_state().rows
        assert rows is not None
        ch = Changes()
        for i in range(len(p.require_state().layers)):  # as an older adrap stored it
            scalars = loads(rows.get(f"L{i}.head", "scalars") or b"")
            assert isinstance(scalars, dict)
            scalars.pop("clusterer_token")
            ch.set(f"L{i}.head", "scalars", dumps(scalars))
        rows.commit(ch)
        layer_store._HEADS.clear()
        reads = clusterer_reads(monkeypatch)
        (root / "new.txt").write_text(
            " ".join(rng.choice(["alpha", "beta", "gamma"]) for _ in range(60))
        )
        p.update([root / "new.txt"])  # its open reads every layer's bytes once
        first = list(reads)
        assert "L0.head" in first
        reads.clear()
        p.require_state()
        p.require_state()
        assert reads == [], "the next opens read the clusterer bytes again"
        check_invariants(p)
    finally:
        p.context.store.close()
