"""State you can see (issue 54): each tree's state ages its rows by its own clock, and a row is
written back only when taken to change (``edit``); the check of edits, on for the whole suite
(tests/conftest.py), refuses a commit that would lose a change made in place without it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ingestor.tree.persist import RECENT_UPDATES, commit_state, load_state, shed_rows
from ingestor.tree.row_containers import KeyedRowMap, RowList
from ingestor.tree.rowmap import CHECK_EDITS_VARIABLE, Clock, RowMap, UneditedChangeError, dumps
from ingestor.tree.state import Node, TreeState
from models_store import Changes, ModelStore, RowStore
from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, make_pipeline, write_corpus


def leaf(node_id: str) -> Node:
    return Node(node_id, 0, f"text of {node_id}", 3, "h", frozenset({f"{node_id}.txt"}))


def committed(models: ModelStore, tree: str, n: int = 3) -> TreeState:
    """Commit a tree of ``n`` leaves ``n0``… and open it again (its rows load lazily)."""
    state = TreeState(tree=tree, root="/r", embed_model="m", dim=2)
    for i in range(n):
        state.nodes[f"n{i}"] = leaf(f"n{i}")
    commit_state(models, state)
    opened = load_state(models, tree)
    assert opened is not None
    return opened


def stored_map(path: Path, values: dict[str, list[int]]) -> RowMap[list[int]]:
    """A map of namespace ``ns`` bound to a database at ``path`` holding ``values``."""
    rows = RowStore.shared(path, create=True)
    ch = Changes()
    for key, value in values.items():
        ch.set("ns", key, dumps(value))
    rows.commit(ch, stamp=1)
    m: RowMap[list[int]] = RowMap("ns", Clock())
    m.bind(rows)
    return m


def written(m: RowMap[list[int]]) -> set[tuple[str, str]]:
    """The rows ``m``'s next commit would put."""
    ch = Changes()
    m.changes(ch)
    return set(ch.put)


def test_each_tree_ages_its_rows_by_its_own_updates(tmp_path: Path) -> None:
    # A process serves several trees: the updates of one must not make another's recent rows
    # look old (with one clock for the process, tree a's updates dropped both of b's rows).
    models = ModelStore(tmp_path / "models")
    a, b = committed(models, "a"), committed(models, "b")
    assert a.clock is not b.clock
    assert all(m.clock is a.clock for m in (a.nodes, a.vectors, a.sources, a.summary_cache))
    b.nodes["n0"]  # read by an update of b
    for _ in range(RECENT_UPDATES):
        assert shed_rows(b, 100) == 0  # b's next updates: under the bound, nothing dropped
    b.nodes["n1"]  # read by b's last update
    for _ in range(3 * RECENT_UPDATES):
        shed_rows(a, 100)  # tree a's updates meanwhile
    assert shed_rows(b, 1) == 1  # past the bound: what b's last updates did not use
    assert b.nodes.holds("n1")
    assert not b.nodes.holds("n0")


def test_an_opened_layer_ages_its_rows_by_its_states_clock(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_corpus(root, random.Random(1), 12)
    p = make_pipeline(tmp_path, EchoSummarizer())
    try:
        p.build(root)
        state = p.require_state()
        assert state.layers
        for al in state.layers:
            maps = [
                al.gmms.rows,
                al.point_of.rows,
                al.guarded.rows,
                al.clusterer.local_models_.rows,
            ]
            assert all(m.clock is state.clock for m in maps)
        check_invariants(p)
    finally:
        p.context.store.close()


def test_a_row_changed_in_place_without_edit_refuses_the_commit(tmp_path: Path) -> None:
    models = ModelStore(tmp_path / "models")
    state = committed(models, "t")
    generation = state.generation
    state.nodes["n1"].parents.append("p")  # read, then changed: not taken with edit()
    with pytest.raises(UneditedChangeError, match=r"'n1' of namespace 'node'.*without edit\(\)"):
        commit_state(models, state)
    assert state.generation == generation
    again = load_state(models, "t")
    assert again is not None
    assert again.generation == generation
    assert again.nodes["n1"].parents == []


def test_an_edited_row_is_written_and_a_row_only_read_is_not(tmp_path: Path) -> None:
    models = ModelStore(tmp_path / "models")
    state = committed(models, "t")
    assert state.nodes["n0"].parents == []  # read only
    state.nodes.edit("n1").parents.append("p")  # taken to change
    ch = Changes()
    state.nodes.changes(ch)
    assert set(ch.put) == {("node", "n1")}, "a row only read was written back"
    commit_state(models, state)
    again = load_state(models, "t")
    assert again is not None
    assert again.nodes["n1"].parents == ["p"]
    # A change after the commit needs its own edit: the row written is the new baseline.
    state.nodes["n1"].parents.append("q")
    with pytest.raises(UneditedChangeError, match="'n1'"):
        commit_state(models, state)


def test_a_change_without_edit_is_named_and_one_with_edit_is_written(tmp_path: Path) -> None:
    m = stored_map(tmp_path / "s.sqlite", {"a": [1], "b": [2]})
    m["a"].append(9)
    assert m.get("b") == [2]
    with pytest.raises(UneditedChangeError, match="'a' of namespace 'ns'"):
        m.changes(Changes())
    m.edit("a")  # said now: written
    assert written(m) == {("ns", "a")}
    with pytest.raises(KeyError):
        m.edit("missing")


def test_a_layers_containers_take_edits_by_their_own_keys(tmp_path: Path) -> None:
    # A stored layer's maps have int or pair keys and its groups' models are a list.
    keyed: KeyedRowMap[int, list[int]] = KeyedRowMap(stored_map(tmp_path / "k", {"7": [1]}), "int")
    items: RowList[list[int]] = RowList(stored_map(tmp_path / "l", {"0": [1], "1": [2]}), 2)
    keyed.edit(7).append(5)
    items.edit(-1).append(5)
    assert items[0] == [1]
    assert written(keyed.rows) == {("ns", "7")}
    assert written(items.rows) == {("ns", "1")}
    with pytest.raises(IndexError):
        items.edit(2)


def test_without_the_check_a_change_made_without_edit_is_silently_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Why the suite runs with the check: outside it, nothing notices.
    monkeypatch.delenv(CHECK_EDITS_VARIABLE)
    m = stored_map(tmp_path / "s.sqlite", {"a": [1]})
    m["a"].append(9)
    assert written(m) == set()
