"""VectorMap: node vectors as the rows of one matrix, with the mapping's behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from ingestor.tree.rowmap import Clock
from ingestor.tree.vector_map import VectorMap


def _vec(x: float, dim: int = 3) -> np.ndarray:
    return np.full(dim, x, dtype=np.float32)


def test_rows_set_in_order_stack_as_a_read_only_view_others_as_a_copy() -> None:
    m = VectorMap(Clock())
    m.reserve(4, 3)
    for i in range(4):
        m[f"n{i}"] = _vec(i)
    view = m.stack(["n1", "n2", "n3"])
    assert not view.flags.writeable
    assert np.shares_memory(view, m.stack(["n0", "n1", "n2", "n3"]))
    copy = m.stack(["n3", "n0"])
    assert copy.flags.writeable
    assert copy.tolist() == [[3.0] * 3, [0.0] * 3]
    with pytest.raises(KeyError):
        m.stack(["n0", "missing"])


def test_a_vector_handed_out_does_not_change_when_its_row_is_reused() -> None:
    m = VectorMap(Clock())
    m["a"] = _vec(1)
    got = m["a"]
    m.pop("a")
    m["b"] = _vec(2)  # takes the freed row
    assert got.tolist() == [1.0] * 3
    assert m["b"].tolist() == [2.0] * 3
    assert "a" not in m
    assert len(m) == 1


def test_the_matrix_grows_and_keeps_every_row() -> None:
    m = VectorMap(Clock())
    for i in range(3000):
        m[str(i)] = _vec(i, 2)
    assert len(m) == 3000
    assert m.stack([str(i) for i in range(3000)])[:, 0].tolist() == list(range(3000))
    del m["5"]
    assert list(m)[:6] == ["0", "1", "2", "3", "4", "6"]


def test_growing_the_matrix_holds_no_third_copy_of_its_rows() -> None:
    """The old matrix and the new one, and a few rows in transit: not a gathered copy of every
    row beside them (1.5 GB more at 1M leaves of 384-d)."""
    import tracemalloc

    m = VectorMap(Clock())
    rows, dim = 60_000, 64  # 15 MB of rows
    m.reserve(rows, dim)
    for i in range(rows):
        m[f"n{i}"] = _vec(i % 7, dim)
    size = rows * dim * 4
    tracemalloc.start()
    try:
        m.reserve(rows, dim)  # grows to twice the rows, moving every row
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * size + size // 2, f"{peak / size:.2f} x the rows"
    assert m["n59999"].tolist() == [59999 % 7] * dim


def test_shed_keeps_recent_rows_compacted_and_fetches_the_rest_back() -> None:
    m = VectorMap(Clock())
    m.fetch = lambda ids: np.stack([_vec(float(i)) for i in ids])
    for i in range(10):
        m[str(i)] = _vec(i)
    assert m.shed() == 10
    assert len(m) == 0
    assert m["7"].tolist() == [7.0] * 3  # fetched again
    assert m.stack(["7"]).tolist() == [[7.0] * 3]
