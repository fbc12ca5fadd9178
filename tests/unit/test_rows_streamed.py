"""A commit streamed a part at a time (``RowStore.commit(fill=...)``, a fresh tree's state):
the same rows as one gathered whole, never more than ``spill_rows`` held, all or nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from models_store import Changes
from models_store.rows import RowStore


def dump(path: Path) -> list[tuple[str, str, bytes, int]]:
    with sqlite3.connect(path) as db:
        return sorted(db.execute("SELECT ns, key, value, stamp FROM rows").fetchall())


def writes(ch: Changes) -> None:
    """A fresh state's writes: cleared namespaces, puts, a put removed again, touches."""
    for ns in ("nodes", "vectors", "L0.gmm"):
        ch.clear.add(ns)
        for i in range(1000):
            ch.set(ns, f"{i:04d}", f"{ns}-{i}".encode() * 3)
    ch.remove("nodes", "0007")
    ch.touch.add(("nodes", "0008"))
    ch.clear.add("intent")
    ch.manifest["tree"] = "t"


def test_a_streamed_commit_writes_what_a_gathered_one_writes(tmp_path: Path) -> None:
    whole, streamed = RowStore(tmp_path / "a.sqlite", create=True), None
    ch = Changes()
    writes(ch)
    got_whole = whole.commit(ch, stamp=3, stamped={"nodes"})

    streamed = RowStore(tmp_path / "b.sqlite", create=True)
    held: list[int] = []
    part = Changes()
    part.spill_rows = 128

    def fill(c: Changes) -> None:
        real = c.spill
        assert real is not None

        def watch(p: Changes) -> None:
            held.append(len(p.put))
            real(p)

        c.spill = watch
        writes(c)

    got_streamed = streamed.commit(part, stamp=3, stamped={"nodes"}, fill=fill)
    assert dump(streamed.path) == dump(whole.path)
    assert got_streamed >= got_whole  # a row written in an earlier part, then removed, counts
    assert streamed.manifest()["tree"] == "t"
    assert len(held) >= 3000 // 128, "written a part at a time"
    assert max(held) <= 128
    assert part.spill is None


def test_a_streamed_commit_that_fails_half_way_writes_nothing(tmp_path: Path) -> None:
    store = RowStore(tmp_path / "s.sqlite", create=True)
    ch = Changes()
    ch.set("nodes", "old", b"kept")
    store.commit(ch)
    before = dump(store.path)

    def fill(c: Changes) -> None:
        c.clear.add("nodes")
        for i in range(1000):  # several parts are written before the failure
            c.set("nodes", str(i), b"x")
        raise RuntimeError("the pickler failed")

    part = Changes()
    part.spill_rows = 100
    with pytest.raises(RuntimeError, match="pickler"):
        store.commit(part, fill=fill)
    assert dump(store.path) == before


def test_a_streamed_commit_also_spills_past_its_bytes(tmp_path: Path) -> None:
    """A layer's fitted models are a few rows of megabytes each: a row count alone would hold
    them all (at 1M leaves, ~1.5 GB of pickled training rows) before writing any."""
    store = RowStore(tmp_path / "m.sqlite", create=True)
    held: list[int] = []

    def fill(c: Changes) -> None:
        real = c.spill
        assert real is not None

        def watch(p: Changes) -> None:
            held.append(sum(len(v) for v in p.put.values()))
            real(p)

        c.spill = watch
        for i in range(20):
            c.set("L0.local", str(i), bytes([i]) * 100_000)

    part = Changes()
    part.spill_rows, part.spill_bytes = 2048, 250_000
    store.commit(part, fill=fill)
    assert held, "spilled before the end"
    assert max(held) <= 300_000
    assert store.count("L0.local") == 20
    assert store.get("L0.local", "7") == bytes([7]) * 100_000
