"""A new embedding model keeps the tree's summaries (ingestor.tree.model_change): every node is
embedded again beside the live store, the layers' models are refitted around their clusters and
the store switches; a kill at any step resumes (the copy from its cursor, never from zero).

Hashed embedders of two sizes stand in for the two models (tests/integration/test_model_change.py
runs the real ones); the store is a real qdrant-edge shard."""

from __future__ import annotations

import gc
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.pipeline.vectors import DedupingEmbedder
from ingestor.tree import changelog, model_change
from ingestor.tree.background import thread_nice
from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.model_change import (
    NS,
    ModelChange,
    copied_through,
    copy_order,
    node_of,
    pending_change,
    stored_model,
)
from ingestor.tree.model_progress import REFIT, SWITCH, change_in
from ingestor.tree.persist import load_state, state_path
from ingestor.tree.rowmap import loads
from ingestor.tree.state import TreeState
from models_store import IncompatibleModelError, ModelStore, RowStore
from retriever import Embedder, SearchFilter
from retriever.edge_shard import swap_folders
from retriever.edge_store import EdgeNodeStore
from retriever.model_switch import EdgeNext, FollowingEmbedder
from testkit.corpus import doc_text
from testkit.fakes import EchoSummarizer, HashEmbedder
from tests.unit.tree.test_adrap import check_invariants, make_pipeline, write_corpus

NEW = "hash-32"


class Embedder32(HashEmbedder):
    """The "new model": 32-d, another projection; counts the texts it embeds and can fail."""

    def __init__(self, fail_after: int | None = None) -> None:
        super().__init__(dim=32, seed=1)
        self.texts: list[str] = []
        self.fail_after = fail_after

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if self.fail_after is not None and len(self.texts) >= self.fail_after:
            raise RuntimeError("killed")
        self.texts.extend(texts)
        return super().embed_documents(texts)


class FailingSwitch(EdgeNext):
    """The embedded next store whose first switch dies before the folders move."""

    def switch(self) -> None:
        raise RuntimeError("killed before the swap")


def changed(
    tmp: Path,
    old: Pipeline,
    embedder: Embedder,
    *,
    summarizer: EchoSummarizer | None = None,
    beside: EdgeNext | None = None,
    on_switch: object = None,
    nice: int = 0,
    writer: FollowingEmbedder | None = None,
) -> Pipeline:
    """A pipeline over ``old``'s store and state whose writers change to ``embedder``'s model
    (``writer``: what its updates embed with, when not the new model from the start)."""
    builder = TreeBuilder(
        writer or embedder,
        summarizer or EchoSummarizer(),
        lambda: TreeClusterer(random_state=0, n_epochs=50),
        TreeParams(summary_max_tokens=40),
    )
    models = ModelStore(tmp / "models")
    store = old.context.store
    change = ModelChange(
        models,
        "t",
        store,
        embedder,
        builder,
        beside=beside,
        on_switch=on_switch,  # type: ignore[arg-type]
        batch=16,
        nice=nice,
    )
    return Pipeline(
        tree="t",
        embedder=writer or embedder,
        builder=builder,
        store=store,
        models=models,
        chunk_tokens=40,
        chunk_overlap=8,
        drift_threshold=100.0,
        model_change=change,
    )


@pytest.fixture
def built(tmp_path: Path) -> tuple[Pipeline, Path]:
    root = tmp_path / "docs"
    write_corpus(root, random.Random(3), 24)
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.build(root)
    return p, root


def summaries(p: Pipeline) -> dict[str, str]:
    state = p.require_state()
    return {i: n.text for i, n in state.nodes.items() if n.layer > 0}


def test_a_new_model_re_embeds_every_node_and_keeps_every_summary(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    old, root = built
    kept = summaries(old)
    nodes = len(old.require_state().nodes)
    emb, echo = Embedder32(), EchoSummarizer()
    switched: list[bool] = []
    p = changed(tmp_path, old, emb, summarizer=echo, on_switch=lambda: switched.append(True))
    state = p.require_state(recover=True)
    assert (state.embed_model, state.dim) == (NEW, 32)
    assert summaries(p) == kept, "the same summaries, same ids and texts"
    assert echo.calls == 0, "no summary was paid"
    assert len(emb.texts) == nodes, "every node embedded once"
    assert switched == [True]
    store = p.context.store
    assert isinstance(store, EdgeNodeStore)
    assert store.embed_model() == NEW
    assert store.dim == 32
    check_invariants(p)  # store == state, payloads (embed_model included) the state's
    some = sorted(state.nodes)[:5]
    want = emb.embed_documents([state.nodes[i].text for i in some])
    np.testing.assert_allclose(store.retrieve_vectors(some), want, atol=1e-5)
    assert not (tmp_path / "qdrant.next").exists()
    assert not (tmp_path / "qdrant.old").exists()
    rows = RowStore.shared(state_path(p.context.models, "t"))
    assert rows.count(NS) == 0
    # The change is a record of the change log, which every reader may see (it names no file).
    for readable in (None, frozenset()):
        newest = changelog.read(rows, limit=1, readable=readable)[0]
        assert newest["kind"] == "model"
        assert newest["detail"].startswith(f"embedding model {old.context.embedder.model_id} ->")
        assert NEW in newest["detail"]
        assert newest["files"] == []
        assert newest["summaries"] == [], "no summary was regenerated"
    hits = store.search(emb.embed_query(state.nodes[some[0]].text), SearchFilter(tree="t"), 3)
    assert hits
    assert hits[0].node.node_id == some[0]
    # Updates go on with the new model, its refitted layers placing the new leaves.
    (root / "late.txt").write_text(doc_text(random.Random(9), 8))
    p.update([root / "late.txt"])
    check_invariants(p)
    assert p.require_state(recover=True).layers[0].clusterer is not None


def test_a_copy_killed_half_way_resumes_from_its_cursor(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    old, _ = built
    kept = summaries(old)
    nodes = len(old.require_state().nodes)
    with pytest.raises(RuntimeError, match="killed"):
        changed(tmp_path, old, Embedder32(fail_after=32)).require_state(recover=True)
    # Killed: the tree, its store and its queries are the old model's, the copy half done.
    rows = RowStore.shared(state_path(old.context.models, "t"))
    found = pending_change(rows)
    assert found is not None
    assert found[1] == 32
    assert found[0].model == NEW
    assert stored_model(state_path(old.context.models, "t")) == ("hash-48", 48)
    store = old.context.store
    assert isinstance(store, EdgeNodeStore)
    assert store.embed_model() == "hash-48"
    check_invariants(old)
    # Run again: it takes up where the cursor is.
    emb = Embedder32()
    p = changed(tmp_path, old, emb)
    p.require_state(recover=True)
    assert len(emb.texts) == nodes - 32, "resumed, not started again"
    assert summaries(p) == kept
    check_invariants(p)


def test_the_copies_of_a_text_are_embedded_once(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    """The copy walks the nodes in the order of their text, so a text's copies come together
    and an embedder that keeps only the last few texts embeds each once. In id order a share's
    copies were spread over the whole copy (26.5k leaves: 8,055 distinct texts cost ~10,400)."""
    old, root = built
    (root / "copies").mkdir()
    for path in sorted(root.glob("*.txt")):
        (root / "copies" / path.name).write_text(path.read_text())
    old.update([root / "copies"])
    texts = [n.text for n in old.require_state().nodes.values()]
    assert len(set(texts)) < len(texts) - 8, "the test needs copies"
    inner = Embedder32()
    p = changed(tmp_path, old, DedupingEmbedder(inner, keep=2))
    p.require_state(recover=True)
    assert sorted(inner.texts) == sorted(set(texts)), "each distinct text embedded once"
    check_invariants(p)


def test_a_copy_an_older_adrap_began_in_id_order_resumes_in_it(
    tmp_path: Path, built: tuple[Pipeline, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change under way when adrap is upgraded has a cursor that is a node id: the copy goes
    on in id order from it (every node copied once), not in the order of the texts."""
    old, _ = built
    nodes = len(old.require_state().nodes)
    with monkeypatch.context() as m:  # the order, and so the cursor, of an older adrap
        m.setattr(
            model_change, "copy_order", lambda state: sorted(state.nodes.keys_with_prefix(""))
        )
        with pytest.raises(RuntimeError, match="killed"):
            changed(tmp_path, old, Embedder32(fail_after=32)).require_state(recover=True)
    rows = RowStore.shared(state_path(old.context.models, "t"))
    assert ":" not in str(loads(rows.get(NS, "cursor")))
    emb = Embedder32()
    p = changed(tmp_path, old, emb)
    p.require_state(recover=True)
    assert len(emb.texts) == nodes - 32, "resumed where it stopped, in id order"
    check_invariants(p)


def test_a_switch_killed_after_its_commit_is_finished_by_the_next_writer(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    old, _ = built
    store = old.context.store
    with pytest.raises(RuntimeError, match="before the swap"):
        changed(tmp_path, old, Embedder32(), beside=FailingSwitch(store)).require_state(
            recover=True
        )
    assert stored_model(state_path(old.context.models, "t")) == (NEW, 32)
    assert (tmp_path / "qdrant.next").is_dir()
    shown = change_in(state_path(old.context.models, "t"))
    assert shown is not None
    assert shown.plan.phase == SWITCH, "status shows the switch"
    emb = Embedder32()
    p = changed(tmp_path, old, emb)
    p.require_state(recover=True)
    assert emb.texts == [], "nothing embedded again: the switch alone was left"
    assert isinstance(store, EdgeNodeStore)
    assert store.embed_model() == NEW
    check_invariants(p)


def test_a_change_killed_in_its_refit_shows_that_phase_and_resumes_there(
    tmp_path: Path, built: tuple[Pipeline, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _ = built
    nodes = len(old.require_state().nodes)
    db = state_path(old.context.models, "t")

    def killed(*_: object) -> int:
        raise RuntimeError("killed in the refit")

    with monkeypatch.context() as m:
        m.setattr(ModelChange, "_refit", killed)
        with pytest.raises(RuntimeError, match="in the refit"):
            changed(tmp_path, old, Embedder32()).require_state(recover=True)
    shown = change_in(db)
    assert shown is not None
    assert (shown.plan.phase, shown.done, shown.plan.total) == (REFIT, nodes, nodes)
    assert stored_model(db) == ("hash-48", 48)
    emb = Embedder32()
    p = changed(tmp_path, old, emb)
    assert p.require_state(recover=True).embed_model == NEW
    assert emb.texts == [], "every node was copied: the refit alone was left"
    assert change_in(db) is None
    check_invariants(p)


def test_setting_the_model_back_abandons_the_copy(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    old, _ = built
    with pytest.raises(RuntimeError):
        changed(tmp_path, old, Embedder32(fail_after=16)).require_state(recover=True)
    assert (tmp_path / "qdrant.next").is_dir()
    back = changed(tmp_path, old, HashEmbedder(dim=48))
    state = back.require_state(recover=True)
    assert state.embed_model == "hash-48"
    assert not (tmp_path / "qdrant.next").exists()
    assert pending_change(RowStore.shared(state_path(old.context.models, "t"))) is None
    check_invariants(back)


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
def test_the_copy_embeds_at_a_lower_priority_than_the_questions_answered_meanwhile(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    """The copy's embedding ran in the caller's thread at its priority: questions answered
    meanwhile waited for the cores (packaged model, 2 cores: 1.93x; bench/model_change.py)."""

    class Niceness(Embedder32):
        def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
            seen.add(thread_nice())
            return super().embed_documents(texts)

    seen: set[int] = set()
    mine = thread_nice()
    old, _ = built
    p = changed(tmp_path, old, Niceness(), nice=7)
    assert p.require_state(recover=True).embed_model == NEW
    assert seen == {min(19, mine + 7)}, seen
    assert thread_nice() == mine, "the caller's own thread keeps its priority"


def test_the_daemon_s_model_change_yields_as_its_updates_do(tmp_path: Path) -> None:
    """The factories give the change the update worker's ADRAP_WATCH__WRITER_NICE."""
    from ingestor.cli.factories import make_pipeline as pipeline_for
    from ingestor.config import Settings

    s = Settings(_env_file=None, state_dir=tmp_path, watch={"writer_nice": 13})  # type: ignore[call-arg]
    with EdgeNodeStore(tmp_path / "qdrant") as store:
        change = pipeline_for(s, store, HashEmbedder()).context.model_change
        assert isinstance(change, ModelChange)
        assert change.nice == 13


def test_a_reader_with_another_model_is_told_how_the_tree_changes_model(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    with pytest.raises(IncompatibleModelError, match="any writing command"):
        load_state(ModelStore(tmp_path / "models"), "t", Embedder32())


def test_the_folder_swap_finishes_when_killed_between_its_renames(tmp_path: Path) -> None:
    live, nxt = tmp_path / "qdrant", tmp_path / "qdrant.next"
    live.mkdir()
    (live / "a").write_text("old")
    nxt.mkdir()
    (nxt / "a").write_text("new")
    live.rename(tmp_path / "qdrant.old")  # the first rename done, then killed
    swap_folders(live, nxt)
    assert (live / "a").read_text() == "new"
    assert not nxt.exists()
    assert not (tmp_path / "qdrant.old").exists()
    swap_folders(live, nxt)  # again: nothing to do
    assert (live / "a").read_text() == "new"


def test_the_query_embedder_follows_the_switch() -> None:
    old, new = HashEmbedder(dim=48), Embedder32()
    follower = FollowingEmbedder(old, new, old.model_id)
    assert (follower.model_id, follower.dim) == ("hash-48", 48)
    assert follower.embed_query("apples").shape == (48,)
    follower.switch()
    assert (follower.model_id, follower.dim) == (NEW, 32)
    assert follower.embed_query("apples").shape == (32,)


def test_a_server_collection_changes_model_through_its_alias(tmp_path: Path) -> None:
    """The same change on the server adapter (qdrant-client local mode): the next generation of
    the alias is written, then the alias switched and the old generation dropped."""
    from qdrant_client import QdrantClient

    from retriever import QdrantNodeStore

    root = tmp_path / "docs"
    write_corpus(root, random.Random(5), 12)
    client = QdrantClient(":memory:")
    old = make_pipeline(tmp_path, EchoSummarizer(), store=QdrantNodeStore(client, "adrap"))
    old.build(root)
    kept = summaries(old)
    with pytest.raises(RuntimeError, match="killed"):
        changed(tmp_path, old, Embedder32(fail_after=16)).require_state(recover=True)
    assert {a.alias_name: a.collection_name for a in client.get_aliases().aliases} == {
        "adrap": "adrap_v1"
    }
    emb = Embedder32()
    p = changed(tmp_path, old, emb)
    p.require_state(recover=True)
    assert len(emb.texts) == len(p.require_state().nodes) - 16, "resumed from the cursor"
    assert {a.alias_name: a.collection_name for a in client.get_aliases().aliases} == {
        "adrap": "adrap_v2"
    }
    assert [c.name for c in client.get_collections().collections] == ["adrap_v2"]
    assert summaries(p) == kept
    check_invariants(p)


def test_a_permission_changed_during_the_copy_reaches_both_stores(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    """A change of model can copy for hours, and runs no update meanwhile: a file made private
    during it was served to its former readers until the switch. The copy now runs the
    permission pass between its steps: the live store at once, and the new store's nodes
    already copied, so the switched store holds the new class too."""
    old, root = built
    before = old.require_state()
    first = [node_of(k) for k in copy_order(before)[:16]]  # the copy's first step (batch=16)
    leaf = next(before.nodes[i] for i in first if before.nodes[i].layer == 0)
    assert leaf.source is not None
    target = root / leaf.source
    was = before.sources[leaf.source].access
    p = changed(tmp_path, old, Embedder32())
    change = p.context.model_change
    assert isinstance(change, ModelChange)
    assert change.between is not None
    inner, steps = change.between, []

    def between(state, nxt, copied):  # type: ignore[no-untyped-def]
        if not steps:  # after the first step: the leaf is in the new store already
            assert copied(leaf.node_id)
            target.chmod(0o600 if target.stat().st_mode & 0o044 else 0o644)
            live = old.context.store.retrieve([leaf.node_id])[0]
            assert list(live.access) == [was]
        steps.append(copied)
        inner(state, nxt, copied)
        if len(steps) == 1:  # the live store has the new class before the copy goes on
            assert list(old.context.store.retrieve([leaf.node_id])[0].access) != [was]

    change.between = between
    state = p.require_state(recover=True)
    assert len(steps) > 1
    now = state.sources[leaf.source].access
    assert now != was
    stored = p.context.store.retrieve([leaf.node_id])[0]
    assert list(stored.access) == [now], "the switched store holds the class set mid-copy"
    check_invariants(p)  # every point's payload is the state's, access included


def stepwise(tmp: Path, old: Pipeline, new: Embedder32) -> tuple[Pipeline, ModelChange]:
    """The daemon's writer over ``old``'s tree while it changes to ``new``'s model: its updates
    embed with the old model (a following embedder) until the switch, the copy runs in steps."""
    was = old.context.embedder
    assert isinstance(was, HashEmbedder)
    follower = FollowingEmbedder(HashEmbedder(dim=was.dim), new, was.model_id)
    p = changed(tmp, old, new, on_switch=follower.switch, writer=follower)
    change = p.context.model_change
    assert isinstance(change, ModelChange)
    change.stepwise = True
    p.context.copy_marks = change.marks
    return p, change


def two_steps(p: Pipeline, change: ModelChange) -> tuple[TreeState, str]:
    """Open the writer's state (nothing is copied), start the copy, run two steps; return the
    state and the committed cursor (the copy key of the last node copied)."""
    state = p.require_state(recover=True)
    assert change.begin()
    assert change.step(state)
    assert change.step(state)
    cursor = str(loads(RowStore.shared(state_path(p.context.models, "t")).get(NS, "cursor")))
    return state, cursor


def copied_leaf(state: TreeState, cursor: str, *, but: str | None = None) -> str:
    """The source of a leaf the copy has written (up to ``cursor``)."""
    copied = copied_through(state, cursor)
    return next(
        n.source
        for i, n in sorted(state.nodes.items())
        if copied(i) and n.layer == 0 and n.source is not None and n.source != but
    )


def assert_new_store_is_the_state(p: Pipeline, emb: Embedder32) -> None:
    """Every point is the state's node (payload), its vector the new model's of its text."""
    check_invariants(p)
    state = p.require_state()
    ids = sorted(state.nodes)
    store = p.context.store
    want = emb.embed_documents([state.nodes[i].text for i in ids])
    np.testing.assert_allclose(store.retrieve_vectors(ids), want, atol=1e-5)


def test_updates_go_on_during_a_copy_in_steps_and_reach_the_new_store(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    """Updates waited for a change of model (the copy ran before the daemon's watcher): hours
    at a million nodes. The daemon's writer now copies in steps between its updates, which embed
    with the old model meanwhile; what an update writes or deletes after its nodes were copied is
    copied again (or deleted) before the switch, so the new store is the final tree."""
    old, root = built
    kept = summaries(old)
    emb = Embedder32()
    p, change = stepwise(tmp_path, old, emb)
    p.require_state(recover=True)
    assert emb.texts == [], "stepwise: opening the state copies nothing"
    state, cursor = two_steps(p, change)
    edited = copied_leaf(state, cursor)
    removed = copied_leaf(state, cursor, but=edited)
    (root / edited).write_text(doc_text(random.Random(21), 7))
    (root / removed).unlink()
    (root / "new.txt").write_text(doc_text(random.Random(22), 6))
    report = p.update([root / edited, root / removed, root / "new.txt"])
    assert report.stats.leaves_added
    assert report.stats.leaves_removed
    # The live store is the old model's, updated at once: queries see the update now.
    state = p.require_state()
    assert state.embed_model == "hash-48"
    check_invariants(p)
    steps = 0
    while change.step(state):
        steps += 1
        state = p.require_state()
        if steps == 3:  # another update mid-copy
            (root / "later.txt").write_text(doc_text(random.Random(23), 5))
            p.update([root / "later.txt"])
            state = p.require_state()
    state = p.require_state()
    assert (state.embed_model, state.dim) == (NEW, 32)
    assert {"new.txt", "later.txt", edited} <= set(state.sources)
    assert removed not in state.sources
    assert_new_store_is_the_state(p, emb)
    assert change.report["summaries_regenerated"] == 0, "the change paid no summary"
    assert set(kept) & set(summaries(p)), "the summaries no update reached are kept"
    rows = RowStore.shared(state_path(p.context.models, "t"))
    assert rows.count(NS) == 0, "no mark is left"
    # The writer follows: its next update embeds with the new model.
    before = len(emb.texts)
    (root / "after.txt").write_text(doc_text(random.Random(24), 5))
    p.update([root / "after.txt"])
    assert len(emb.texts) > before
    assert_new_store_is_the_state(p, emb)


def test_a_copy_in_steps_killed_after_an_update_copies_that_update_when_resumed(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    """The marks of what an update wrote are committed with its intent: a daemon killed after
    the update (its nodes copied before it) copies them again once restarted."""
    old, root = built
    p, change = stepwise(tmp_path, old, Embedder32())
    state, cursor = two_steps(p, change)
    edited = copied_leaf(state, cursor)
    (root / edited).write_text(doc_text(random.Random(31), 6))
    p.update([root / edited])
    del p, change, state  # killed: its new store is closed when collected
    gc.collect()
    emb = Embedder32()
    again, change = stepwise(tmp_path, old, emb)
    state = again.require_state(recover=True)
    assert change.begin()
    while change.step(state):
        state = again.require_state()
    assert again.require_state().embed_model == NEW
    assert_new_store_is_the_state(again, emb)


def test_a_permission_changed_during_a_copy_in_steps_reaches_the_switched_store(
    tmp_path: Path, built: tuple[Pipeline, Path]
) -> None:
    """The daemon's permission pass is an update like any other during a copy in steps: the
    live store gets the new class at once, and the nodes it changed are copied again, so the
    switched store has it too."""
    old, root = built
    emb = Embedder32()
    p, change = stepwise(tmp_path, old, emb)
    state, cursor = two_steps(p, change)
    source = copied_leaf(state, cursor)
    copied = copied_through(state, cursor)
    leaf = next(i for i, n in state.nodes.items() if n.source == source and copied(i))
    was = state.sources[source].access
    target = root / source
    target.chmod(0o600 if target.stat().st_mode & 0o044 else 0o644)
    assert p.update_access(state).files_reclassed == 1
    now = p.require_state().sources[source].access
    assert now != was
    assert list(p.context.store.retrieve([leaf])[0].access) == [now], "the live store at once"
    while change.step(state):
        state = p.require_state()
    assert p.require_state().embed_model == NEW
    assert list(p.context.store.retrieve([leaf])[0].access) == [now], "and the switched store"
    assert_new_store_is_the_state(p, emb)
