"""The state database: incremental commits, crash windows, readers, refusal, bounded cache.

Real UMAP + online GMM, a real qdrant-edge shard, hashed embeddings and echo summaries.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ingestor.errors import SummarizationError, TreeError
from ingestor.pipeline import Pipeline, load_state, state_exists
from ingestor.tree import persist
from ingestor.tree.persist import commit_state, pending_intent, state_path
from models_store import Changes, IncompatibleModelError, ModelStore, ModelStoreError, RowStore
from retriever import SearchFilter, StoreError
from testkit.fakes import EchoSummarizer, HashEmbedder
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline, write_corpus


@pytest.fixture
def built(tmp_path: Path) -> tuple[Pipeline, Path]:
    root = tmp_path / "docs"
    write_corpus(root, random.Random(0), 14)
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.build(root)
    return p, root


def test_a_one_document_update_rewrites_only_the_rows_it_changed(
    built: tuple[Pipeline, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, root = built
    rows = RowStore(state_path(p.context.models, "t"), readonly=True)
    before = dict(sqlite3.connect(rows.path).execute("SELECT ns || ':' || key, value FROM rows"))
    written: set[str] = set()
    commit = RowStore.commit

    def spy(store: RowStore, changes: Changes, **kwargs: Any) -> int:
        written.update(f"{ns}:{key}" for ns, key in changes.put)
        return commit(store, changes, **kwargs)

    monkeypatch.setattr(RowStore, "commit", spy)
    (root / "new.txt").write_text(doc_text(random.Random(5), 5))
    p.update([root / "new.txt"])
    after = dict(sqlite3.connect(rows.path).execute("SELECT ns || ':' || key, value FROM rows"))
    nodes = [k for k in after if k.startswith("node:")]
    rewritten = [k for k in nodes if k in written]
    assert 0 < len(rewritten) < len(nodes) / 2, "only the nodes the update touched are written"
    untouched = [k for k in nodes if k in before and k not in written]
    assert untouched
    assert all(after[k] == before[k] for k in untouched)
    assert all(k in written for k in after if before.get(k) != after[k]), "all changes committed"
    check_invariants(p)


def test_a_crash_between_commit_and_delete_is_repaired_by_the_next_cli_update(
    built: tuple[Pipeline, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intent names the points to delete; the next writer deletes them (no daemon needed)."""
    p, root = built
    doomed = sorted(p.require_state().sources["d0.txt"].node_ids)

    def crash(ids: Any) -> None:
        raise KeyboardInterrupt("killed between the state commit and the deletes")

    monkeypatch.setattr(p.context.store, "delete", crash)
    (root / "d0.txt").unlink()
    with pytest.raises(KeyboardInterrupt):
        p.update([root / "d0.txt"])
    monkeypatch.undo()
    assert set(doomed) <= set(p.context.store.iter_ids("t")), (
        "the removed document is still searchable"
    )
    state = p.require_state()
    intent = pending_intent(state)
    assert intent is not None
    assert intent.committed
    (root / "x.txt").write_text(doc_text(random.Random(9), 4))
    p.update([root / "x.txt"])
    assert not set(doomed) & set(p.context.store.iter_ids("t"))
    check_invariants(p)


def test_a_crash_before_the_commit_leaves_the_previous_tree_and_no_orphans(
    built: tuple[Pipeline, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, root = built
    generation = p.require_state().generation
    stored = set(p.context.store.iter_ids("t"))

    def crash(*args: Any, **kwargs: Any) -> int:
        raise KeyboardInterrupt("killed after the upserts, before the state commit")

    monkeypatch.setattr(persist, "commit_state", crash)
    monkeypatch.setattr("ingestor.pipeline.context.commit_state", crash)
    (root / "late.txt").write_text(doc_text(random.Random(7), 6))
    with pytest.raises(KeyboardInterrupt):
        p.update([root / "late.txt"])
    monkeypatch.undo()
    assert set(p.context.store.iter_ids("t")) > stored, "the update's new points were written"
    assert p.require_state().generation == generation, "nothing of the update was committed"
    p.update([root / "late.txt"])
    check_invariants(p)
    assert "late.txt" in p.require_state().sources


def test_a_failed_commit_writes_nothing(tmp_path: Path) -> None:
    rows = RowStore(tmp_path / "s.sqlite", create=True)
    from models_store import Changes

    ok = Changes()
    ok.set("a", "1", b"one")
    rows.commit(ok, stamp=1)
    bad = Changes()
    bad.set("a", "2", b"two")
    bad.manifest = {"x": object()}  # not JSON: fails inside the transaction
    with pytest.raises((ModelStoreError, TypeError)):
        rows.commit(bad, stamp=2)
    assert rows.get("a", "2") is None
    assert rows.get("a", "1") == b"one"


def test_readers_see_the_last_committed_generation_while_a_writer_is_mid_update(
    built: tuple[Pipeline, Path],
) -> None:
    p, _ = built
    state = p.require_state()
    generation = state.generation
    n_nodes = len(state.nodes)
    rows: RowStore = state.rows
    rows._db.execute("BEGIN IMMEDIATE")  # a writer holds an open transaction
    rows._db.execute("DELETE FROM rows WHERE ns = 'node'")
    reader = load_state(p.context.models, "t", readonly=True)
    assert reader is not None
    assert reader.generation == generation
    assert len(reader.nodes) == n_nodes > 0
    rows._db.execute("ROLLBACK")


def test_read_only_opening_creates_nothing(tmp_path: Path) -> None:
    models = ModelStore(tmp_path / "models")
    assert load_state(models, "t", readonly=True) is None
    assert not state_exists(models, "t")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_state_of_another_embedding_model_is_refused_with_how_to_change_model(
    built: tuple[Pipeline, Path],
) -> None:
    # A reader: a writer changes the tree's model (tests/unit/tree/test_model_change.py).
    p, _ = built
    with pytest.raises(IncompatibleModelError, match=r"hash-48.*any writing command"):
        load_state(p.context.models, "t", HashEmbedder(dim=16))


def test_the_summary_cache_is_bounded(
    built: tuple[Pipeline, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, root = built
    monkeypatch.setattr(persist, "CACHE_MIN", 5)
    monkeypatch.setattr(persist, "CACHE_FACTOR", 1)
    rng = random.Random(3)
    for i in range(6):
        (root / f"d{i}.txt").write_text(doc_text(rng, 6))
        p.update([root / f"d{i}.txt"])
    state = p.require_state()
    summaries = sum(n for layer, n in state.layer_counts().items() if layer > 0)
    assert state.rows.count("cache") <= max(5, summaries)
    check_invariants(p)


def test_removing_a_path_not_in_the_tree_commits_nothing(built: tuple[Pipeline, Path]) -> None:
    p, root = built
    generation = p.require_state().generation
    with pytest.raises(TreeError, match="not in tree"):
        p.update([root / "nope.txt"], remove=True)
    assert p.require_state().generation == generation


def test_vectors_lost_from_the_store_are_embedded_again_on_recovery(
    built: tuple[Pipeline, Path],
) -> None:
    p, _ = built
    state = p.require_state()
    victim = sorted(state.sources["d1.txt"].node_ids)[0]
    p.context.store.delete([victim])
    with pytest.raises(StoreError):
        state.matrix([victim])
    vec = p.vectors_of(state, [victim])
    assert vec.shape == (1, p.context.embedder.dim)


@dataclass
class LegacyState:
    """The shape of adrap 0.1's pickled TreeState (what _migrate reads)."""

    tree: str
    root: str
    embed_model: str
    dim: int
    params: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    nodes: dict[str, Any] = field(default_factory=dict)
    vectors: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Any] = field(default_factory=dict)
    layers: list[Any] = field(default_factory=list)
    summary_cache: dict[str, str] = field(default_factory=dict)
    leaves_at_build: int = 0
    added_since_build: int = 0
    removed_since_build: int = 0
    built_at: float = 0.0


def test_a_state_pickled_by_adrap_0_1_is_converted_on_first_open(
    built: tuple[Pipeline, Path],
) -> None:
    p, _ = built
    state = p.require_state()
    legacy = LegacyState(
        tree="t2",
        root=state.root,
        embed_model=state.embed_model,
        dim=state.dim,
        generation=7,
        nodes=dict(state.nodes.items()),
        sources=dict(state.sources.items()),
        layers=list(state.layers),
        summary_cache={"k": "v"},
    )
    p.context.models.save(
        "tree-t2", legacy, extra={"embed_model": state.embed_model, "dim": state.dim}
    )
    converted = load_state(p.context.models, "t2", p.context.embedder)
    assert converted is not None
    assert set(converted.nodes) == set(state.nodes)
    assert not p.context.models.exists("tree-t2"), "the pickle is gone once converted"
    again = load_state(p.context.models, "t2", p.context.embedder)
    assert again is not None
    assert again.generation == 8
    assert again.summary_cache["k"] == "v"
    assert commit_state(p.context.models, again) > 0


def test_a_rebuild_of_a_stored_tree_writes_every_leaf_it_changed(tmp_path: Path) -> None:
    """A drift rebuild resets every leaf's parents in place: the state must store them all.

    Here the tree shrinks below 10 leaves, so its leaves lose their parents; a state that wrote
    only the nodes handed out for change kept the old parents while the store had none.
    """
    root = tmp_path / "docs"
    write_corpus(root, random.Random(0), 14)
    p = make_pipeline(tmp_path, EchoSummarizer(), drift=0.0)  # every update rebuilds
    p.build(root)
    assert p.require_state().layers
    for i in range(1, 14):
        (root / f"d{i}.txt").unlink()
    report = p.update([root / f"d{i}.txt" for i in range(1, 14)], remove=True)
    assert report.rebuilt
    check_invariants(p)


class _Stop(Exception):
    """Stands for a kill during the first build."""


def test_a_first_build_interrupted_half_way_resumes_without_embedding_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each embedded batch is checkpointed as it goes; the next build takes those vectors back."""
    import ingestor.pipeline.vectors as stage

    monkeypatch.setattr(stage, "EMBED_BATCH", 8)
    root = tmp_path / "docs"
    write_corpus(root, random.Random(0), 14)
    p = make_pipeline(tmp_path, EchoSummarizer())
    calls: list[int] = []
    inner = p.context.embedder.embed_documents

    def counting(texts: Any) -> Any:
        calls.append(len(texts))
        return inner(texts)

    monkeypatch.setattr(p.context.embedder, "embed_documents", counting)

    def stop_after_three_batches(stage_name: str, done: int, total: int) -> None:
        if stage_name == "embed leaves" and done >= 24:
            raise _Stop

    with pytest.raises(_Stop):
        p.build(root, stop_after_three_batches)
    assert sum(calls) == 24
    assert load_state(p.context.models, "t") is None, "nothing was committed"
    calls.clear()
    report = p.build(root)
    leaves = report.leaves
    embedded_leaves = sum(calls) - sum(n for layer, n in report.layers.items() if layer > 0)
    assert embedded_leaves == leaves - 24, "the 24 stored leaves were not embedded again"
    check_invariants(p)


class GatedSummarizer(EchoSummarizer):
    """Holds every summary call until released (an LLM taking its time), or fails it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.waiting = threading.Event()
        self.fail = False

    def summarize_many(self, groups: Any, *, max_tokens: int, query: str | None = None) -> Any:
        self.waiting.set()
        assert self.gate.wait(60), "never released"
        if self.fail:
            raise SummarizationError("endpoint http://llm/v1 returned 503; check the server")
        return super().summarize_many(groups, max_tokens=max_tokens, query=query)


@pytest.mark.parametrize("drift", [100.0, 0.0], ids=["adrap", "drift-rebuild"])
def test_new_leaves_are_searchable_while_their_summaries_are_written(
    tmp_path: Path, drift: float
) -> None:
    """File -> searchable is the embedding, not adRAP: a new file's leaves are in the store
    before the summaries over them, also when the update is a drift rebuild (a small tree
    growing by 30 %: often, for a new user); an update that then fails leaves none behind."""
    root = tmp_path / "docs"
    write_corpus(root, random.Random(0), 14)
    s = GatedSummarizer()
    s.gate.set()
    p = make_pipeline(tmp_path, s, drift=drift)
    p.build(root)
    s.gate.clear()
    s.waiting.clear()
    flt = SearchFilter(tree="t", source_prefix="new.txt", max_layer=0)

    for fail in (False, True):
        (root / "new.txt").write_text(doc_text(random.Random(7 + fail), 6))
        s.fail = fail
        errors: list[BaseException] = []

        def run(errors: list[BaseException] = errors) -> None:
            try:
                p.update([root / "new.txt"])
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=run)
        t.start()
        assert s.waiting.wait(60)
        leaves = p.context.store.count(flt)
        assert leaves > 0, "the new leaves wait for their summaries"
        s.gate.set()
        t.join(60)
        s.gate.clear()
        s.waiting.clear()
        if fail:
            assert errors
            assert isinstance(errors[0], SummarizationError)
            p.require_state(recover=True)  # what the next writer (or the daemon's retry) runs
            assert set(p.context.store.iter_ids("t")) == set(p.require_state().nodes)
            assert "new.txt" not in p.require_state().sources
        else:
            assert not errors
            check_invariants(p)
            (root / "new.txt").unlink()
            s.gate.set()  # (a drift rebuild summarises again)
            p.update([root / "new.txt"])
            s.gate.clear()
            s.waiting.clear()


def test_stored_payloads_come_back_equal_so_a_daemon_start_re_stores_nothing(
    built: tuple[Pipeline, Path],
) -> None:
    """qdrant-edge keeps 16 significant digits of a float, so a time.time() stamp of 17 digits
    came back changed: every daemon start found those payloads "different" and wrote them again."""
    p, _ = built
    assert p.reconcile_store(p.require_state()) == (0, 0)
    state = p.require_state()
    node_id = sorted(state.nodes)[0]
    state.nodes[node_id].updated_at = 1795399810.6701941  # 17 significant digits
    p.context.store.upsert(state.payloads([node_id]), state.matrix([node_id]))
    assert p.context.store.retrieve([node_id]) == state.payloads([node_id])


@pytest.mark.parametrize("stored", [2, 99])
def test_a_state_of_an_older_readable_format_opens_and_an_unknown_one_is_refused(
    built: tuple[Pipeline, Path], stored: int
) -> None:
    """Format 3 packs a group's points (format 2: a row each, still read): a format-2 state opens
    and its next commit marks it 3, so an adrap that reads only format 2 refuses it instead of
    misreading it; a format this version does not know is refused with how to rebuild."""
    p, root = built
    path = state_path(p.context.models, "t")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE manifest SET value = ? WHERE key = 'format'", (str(stored),))
    if stored == 99:
        with pytest.raises(IncompatibleModelError, match=r"format 99.*adrap build"):
            load_state(p.context.models, "t")
        return
    assert load_state(p.context.models, "t") is not None
    (root / "new.txt").write_text(doc_text(random.Random(5), 5))
    p.update([root / "new.txt"])
    assert RowStore(path, readonly=True).manifest()["format"] == persist.STATE_FORMAT == 3
    check_invariants(p)
