"""adRAP invariants over random add/edit/remove sequences: real UMAP + online GMM, real qdrant-edge,
hashed embeddings and echo summaries (so each example runs in seconds)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.tree.build import TreeBuilder, TreeParams
from models_store import ModelStore
from retriever import NodeStore, SearchFilter
from retriever.edge_store import EdgeNodeStore
from testkit.corpus import TOPICS, doc_text
from testkit.fakes import EchoSummarizer, HashEmbedder


def make_pipeline(
    tmp: Path,
    summarizer: EchoSummarizer,
    drift: float = 100.0,
    *,
    store: NodeStore | None = None,
    leaves_first: bool = True,
    rebuild_max_leaves: int = 20_000,
) -> Pipeline:
    emb = HashEmbedder(dim=48)
    builder = TreeBuilder(
        emb,
        summarizer,
        lambda: TreeClusterer(random_state=0, n_epochs=50),
        TreeParams(summary_max_tokens=40),
    )
    return Pipeline(
        tree="t",
        embedder=emb,
        builder=builder,
        store=store or EdgeNodeStore(tmp / "qdrant"),
        models=ModelStore(tmp / "models"),
        chunk_tokens=40,
        chunk_overlap=8,
        drift_threshold=drift,
        rebuild_max_leaves=rebuild_max_leaves,
        leaves_first=leaves_first,
    )


def check_invariants(p: Pipeline, min_top_nodes: int = 10) -> None:
    from ingestor.tree.invariants import violations

    state = p.require_state()
    assert violations(state, min_top_nodes=min_top_nodes) == []
    stored = set(p.context.store.iter_ids("t"))
    assert stored == set(state.nodes), "store and state disagree"
    for payload in p.context.store.retrieve(list(state.nodes)):
        node = state.nodes[payload.node_id]
        assert list(payload.parents) == node.parents
        assert list(payload.children) == node.children
        # The whole payload (sources, folders and their caps included) is the state's.
        assert payload == node.payload(state.tree, state.embed_model), payload.node_id


def write_corpus(root: Path, rng: random.Random, n_docs: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_docs):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 10)))


OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "edit", "remove", "add_dir", "rename"]), st.integers(0, 10**6)
    ),
    min_size=3,
    max_size=7,
)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, seed=st.integers(0, 1000))
def test_random_adds_edits_and_removes_keep_the_tree_consistent(
    tmp_path_factory: pytest.TempPathFactory, ops, seed
) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("adrap")
    rng = random.Random(seed)
    root = tmp / "docs"
    write_corpus(root, rng, 8)
    p = make_pipeline(tmp, EchoSummarizer())
    try:
        p.build(root)
        check_invariants(p)
        for op, r in ops:
            files = sorted(root.glob("*.txt"))
            if op == "add":
                path = root / f"n{r}.txt"
                path.write_text(doc_text(rng, rng.randint(3, 9)))
                p.update([path])
            elif op == "add_dir":
                sub = root / f"sub{r}"
                write_corpus(sub, rng, 2)
                p.update([sub])
            elif op == "edit" and files:
                path = files[r % len(files)]
                sentences = path.read_text().split(". ")
                sentences[r % len(sentences)] = doc_text(rng, 1).rstrip(".")
                path.write_text(". ".join(sentences))
                p.update([path])
            elif op == "rename" and files:
                # Removal and insertion of the same chunks in one batch, plus a new file.
                files[r % len(files)].rename(root / f"renamed{r}.txt")
                (root / f"with{r}.txt").write_text(doc_text(rng, 4))
                p.update([root])
            elif op == "remove" and files:
                path = files[r % len(files)]
                path.unlink()
                p.update([path])
            check_invariants(p)
        state = p.require_state()
        on_disk = {f.relative_to(root).as_posix() for f in root.rglob("*.txt")}
        assert set(state.sources) == on_disk
    finally:
        p.context.store.close()


def test_an_edit_keeps_the_nodes_of_unchanged_chunks(tmp_path: Path) -> None:
    rng = random.Random(1)
    root = tmp_path / "docs"
    write_corpus(root, rng, 6)
    p = make_pipeline(tmp_path, EchoSummarizer())
    try:
        p.build(root)
        path = root / "d0.txt"
        before = set(p.require_state().sources["d0.txt"].node_ids)
        path.write_text(path.read_text() + " " + doc_text(rng, 3))
        report = p.update([path])
        after = set(p.require_state().sources["d0.txt"].node_ids)
        assert before & after, "unchanged chunks must keep their node ids"
        assert report.stats.leaves_added == len(after - before)
        assert report.stats.leaves_removed == len(before - after)
        check_invariants(p)
    finally:
        p.context.store.close()


def test_one_small_update_regenerates_few_summaries(tmp_path: Path) -> None:
    rng = random.Random(2)
    root = tmp_path / "docs"
    write_corpus(root, rng, 30)
    summarizer = EchoSummarizer()
    p = make_pipeline(tmp_path, summarizer)
    try:
        p.build(root)
        built_calls = summarizer.calls
        (root / "new.txt").write_text(doc_text(rng, 3))
        report = p.update([root / "new.txt"])
        assert 0 < report.stats.summaries_regenerated <= max(1, built_calls // 5)
        assert summarizer.calls - built_calls == report.stats.summaries_regenerated
        check_invariants(p)
    finally:
        p.context.store.close()


def test_removing_every_document_leaves_an_empty_tree(tmp_path: Path) -> None:
    rng = random.Random(3)
    root = tmp_path / "docs"
    write_corpus(root, rng, 10)
    p = make_pipeline(tmp_path, EchoSummarizer())
    try:
        p.build(root)
        p.update([root], remove=True)
        state = p.require_state()
        assert state.nodes == {}
        assert state.sources == {}
        assert p.context.store.count(SearchFilter(tree="t")) == 0
    finally:
        p.context.store.close()


def test_the_same_sequence_with_the_same_seed_gives_the_same_tree(tmp_path: Path) -> None:
    trees = []
    for run in range(2):
        rng = random.Random(4)
        root = tmp_path / f"run{run}" / "docs"
        write_corpus(root, rng, 10)
        p = make_pipeline(tmp_path / f"run{run}", EchoSummarizer())
        try:
            p.build(root)
            (root / "x.txt").write_text(doc_text(rng, 5))
            p.update([root / "x.txt"])
            (root / "d1.txt").unlink()
            p.update([root / "d1.txt"])
            state = p.require_state()
            trees.append(
                sorted((n.layer, n.text, tuple(sorted(n.sources))) for n in state.nodes.values())
            )
        finally:
            p.context.store.close()
    assert trees[0] == trees[1]


def test_drift_past_the_threshold_triggers_a_full_rebuild_reusing_cached_summaries(
    tmp_path: Path,
) -> None:
    rng = random.Random(5)
    root = tmp_path / "docs"
    write_corpus(root, rng, 10)
    summarizer = EchoSummarizer()
    p = make_pipeline(tmp_path, summarizer, drift=0.3)
    try:
        p.build(root)
        sub = root / "more"
        write_corpus(sub, rng, 6)
        report = p.update([sub])
        assert report.rebuilt
        assert report.stats.summary_cache_hits + report.stats.summaries_regenerated > 0
        state = p.require_state()
        assert state.added_since_build == 0
        assert state.leaves_at_build == len(state.ids_in_layer(0))
        check_invariants(p)
    finally:
        p.context.store.close()


def test_build_and_update_in_server_mode_through_qdrant_client(tmp_path: Path) -> None:
    """The same pipeline on the server adapter (qdrant-client local mode, same client API)."""
    from qdrant_client import QdrantClient

    from retriever import QdrantNodeStore, collapsed_tree

    rng = random.Random(6)
    root = tmp_path / "docs"
    write_corpus(root, rng, 12)
    p = make_pipeline(
        tmp_path, EchoSummarizer(), store=QdrantNodeStore(QdrantClient(":memory:"), "adrap")
    )
    p.build(root)
    check_invariants(p)
    (root / "late.txt").write_text(doc_text(rng, 6))
    report = p.update([root / "late.txt"])
    assert report.stats.leaves_added > 0
    check_invariants(p)
    hits = collapsed_tree(
        p.context.store, p.context.embedder.embed_query(TOPICS[0]), SearchFilter(tree="t")
    )
    assert hits
    assert all(h.node.tree == "t" for h in hits)


@pytest.mark.parametrize("seed", [7, 8, 10])
def test_a_rename_and_an_insert_in_one_batch_leave_every_leaf_with_a_parent(
    tmp_path: Path, seed: int
) -> None:
    """Regression: a cluster emptied and re-populated within one batch must be regenerated."""
    rng = random.Random(seed)
    root = tmp_path / "docs"
    write_corpus(root, rng, 8)
    p = make_pipeline(tmp_path, EchoSummarizer())
    try:
        p.build(root)
        for step in range(3):
            files = sorted(root.rglob("*.txt"))
            files[rng.randrange(len(files))].rename(root / f"renamed{step}.txt")
            (root / f"new{step}.txt").write_text(doc_text(rng, 5))
            p.update([root])
            check_invariants(p)
    finally:
        p.context.store.close()


def test_removing_a_path_that_is_not_in_the_tree_is_a_clear_error(tmp_path: Path) -> None:
    from ingestor.errors import TreeError

    rng = random.Random(8)
    root = tmp_path / "docs"
    write_corpus(root, rng, 4)
    p = make_pipeline(tmp_path, EchoSummarizer())
    try:
        p.build(root)
        with pytest.raises(TreeError, match=r"nope\.txt' is not in tree 't'"):
            p.update([root / "nope.txt"], remove=True)
        assert len(p.require_state().sources) == 4
    finally:
        p.context.store.close()
