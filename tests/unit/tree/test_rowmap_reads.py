"""A stored tree is read in batches: a prefetch answers later lookups, found or not, so an update
issues a handful of queries per layer instead of one per node (~2,000 an add at 26k leaves)."""

from __future__ import annotations

from pathlib import Path

from ingestor.tree.layer_store import KeyedRowMap
from ingestor.tree.rowmap import RowMap, dumps
from models_store import Changes, RowStore


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
    m: RowMap[int] = RowMap("m")
    m.bind(rows)
    m.prefetch(["1", "2", "nope", "also-missing"])
    assert rows.many == 1
    assert m.peek("2") == 4
    assert "nope" not in m
    assert m.get("also-missing") is None
    assert rows.single == 0, "no row read one by one after the prefetch"
    m["nope"] = 7  # a key found missing can still be set, and is then there
    assert m["nope"] == 7
    assert "3" in m  # not prefetched: read on its own
    assert rows.single == 1


def test_keyed_maps_prefetch_their_encoded_keys(tmp_path: Path) -> None:
    rows = stored(tmp_path)
    inner: RowMap[str] = RowMap("p")
    inner.bind(rows)
    at: KeyedRowMap[tuple[int, int], str] = KeyedRowMap(inner, "pair")
    at.prefetch([(0, i) for i in range(10)])
    assert [at[(0, i)] for i in range(10)] == [f"n{i}" for i in range(10)]
    assert (rows.many, rows.single) == (1, 0)
