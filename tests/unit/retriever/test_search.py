"""Collapsed tree and traversal over a real qdrant-edge shard, with a hashed embedder and fake tree."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.state import Node, SourceEntry, TreeState, leaf_id, sha256_text
from retriever import PAPERS_FILL, SearchFilter, collapsed_tree, fill_budget, tree_traversal
from retriever.edge_store import EdgeNodeStore
from testkit.fakes import ByteTokenizer, EchoSummarizer, HashEmbedder
from tests.unit.tree.test_build import ConsecutiveClusterer

TOPICS = [
    "apples orchard fruit harvest",
    "rockets orbit launch fuel",
    "violins music concert strings",
]


@pytest.fixture(scope="module")
def tree(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EdgeNodeStore, HashEmbedder, TreeState]]:
    emb = HashEmbedder(dim=64)
    state = TreeState(tree="t", root="/r", embed_model=emb.model_id, dim=emb.dim)
    for i in range(36):
        topic = TOPICS[i // 12]
        text = f"{topic} note {i} " + " ".join(topic.split() * 3)
        source = f"{topic.split()[0]}/doc{i % 3}.txt"
        nid = leaf_id("t", source, sha256_text(text), 0)
        state.nodes[nid] = Node(
            nid, 0, text, 40, sha256_text(text), frozenset({source}), source=source
        )
        state.vectors[nid] = emb.embed_documents([text])[0]
        state.sources.setdefault(source, SourceEntry("h", 1, 0.0, [])).node_ids.append(nid)
    TreeBuilder(
        emb, EchoSummarizer(), lambda: ConsecutiveClusterer(4), TreeParams(), ByteTokenizer()
    ).build(state)
    store = EdgeNodeStore(tmp_path_factory.mktemp("edge"))
    store.ensure_collection(emb.dim, emb.model_id)
    ids = list(state.nodes)
    store.upsert(state.payloads(ids), state.matrix(ids))
    yield store, emb, state
    store.close()


def test_collapsed_tree_stays_within_the_token_budget_in_score_order(tree) -> None:  # type: ignore[no-untyped-def]
    store, emb, _ = tree
    hits = collapsed_tree(
        store, emb.embed_query("rockets launch"), SearchFilter(tree="t"), max_tokens=300
    )
    assert sum(h.node.n_tokens for h in hits) <= 300
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert "rockets" in hits[0].node.text


def test_collapsed_tree_mixes_layers_and_honours_a_layer_range(tree) -> None:  # type: ignore[no-untyped-def]
    store, emb, _ = tree
    v = emb.embed_query("violins concert")
    hits = collapsed_tree(store, v, SearchFilter(tree="t"), rule=PAPERS_FILL)
    assert {h.node.layer for h in hits} > {0}
    leaves = collapsed_tree(store, v, SearchFilter(tree="t", max_layer=0))
    assert leaves
    assert all(h.node.layer == 0 for h in leaves)


def test_a_source_folder_filter_reaches_summaries_too(tree) -> None:  # type: ignore[no-untyped-def]
    store, emb, _ = tree
    hits = collapsed_tree(
        store,
        emb.embed_query("fruit"),
        SearchFilter(tree="t", source_prefix="apples/"),
        rule=PAPERS_FILL,
    )
    assert hits
    assert all(all(s.startswith("apples/") for s in h.node.sources) for h in hits)
    assert any(h.node.layer > 0 for h in hits)


def test_traversal_descends_from_the_top_layer_through_children(tree) -> None:  # type: ignore[no-untyped-def]
    store, emb, state = tree
    hits = tree_traversal(
        store, emb.embed_query("orbit fuel"), SearchFilter(tree="t"), top_k=2, max_tokens=10_000
    )
    top = max(state.layer_counts())
    assert {h.node.layer for h in hits} == set(range(top + 1))
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    by_id = {h.node.node_id: h.node for h in hits}
    for h in hits:
        if h.node.layer < top:  # reached through a selected parent one layer up
            assert any(p in by_id and by_id[p].layer == h.node.layer + 1 for p in h.node.parents)


def test_traversal_under_a_small_budget_keeps_the_most_similar_nodes(tree) -> None:  # type: ignore[no-untyped-def]
    store, emb, _ = tree
    v = emb.embed_query("orbit fuel")
    everything = tree_traversal(store, v, SearchFilter(tree="t"), top_k=2, max_tokens=10_000)
    budget = sum(h.node.n_tokens for h in everything[:2])
    assert (
        tree_traversal(store, v, SearchFilter(tree="t"), top_k=2, max_tokens=budget)
        == everything[:2]
    )


def test_fill_stops_at_the_first_node_that_does_not_fit(tree) -> None:  # type: ignore[no-untyped-def]
    store, emb, _ = tree
    hits = store.search(emb.embed_query("apples"), SearchFilter(tree="t"), 10)
    budget = hits[0].node.n_tokens + 1
    assert fill_budget(hits, budget) == hits[:1]


def test_an_unknown_tree_returns_nothing(tree) -> None:  # type: ignore[no-untyped-def]
    store, emb, _ = tree
    assert collapsed_tree(store, emb.embed_query("apples"), SearchFilter(tree="nope")) == []
    assert tree_traversal(store, emb.embed_query("apples"), SearchFilter(tree="nope")) == []


def _redundant(hits, share: float) -> list[str]:  # type: ignore[no-untyped-def]
    """The summaries among ``hits`` that share the context with ``share`` of their children."""
    ids = {h.node.node_id for h in hits}
    return [
        h.node.node_id
        for h in hits
        if h.node.children
        and sum(c in ids for c in h.node.children) >= share * len(h.node.children)
    ]


@pytest.mark.parametrize("question", ["rockets launch", "violins concert strings", "fruit"])
def test_collapsed_tree_leaves_out_summaries_whose_children_are_in_the_context(  # type: ignore[no-untyped-def]
    tree, question: str
) -> None:
    store, emb, _ = tree
    v, flt = emb.embed_query(question), SearchFilter(tree="t")
    repeated = 0
    for budget in (120, 200, 300, 450, 700):
        plain = collapsed_tree(store, v, flt, max_tokens=budget, rule=PAPERS_FILL)
        hits = collapsed_tree(store, v, flt, max_tokens=budget)
        assert not _redundant(hits, 0.3)
        assert sum(h.node.n_tokens for h in hits) <= budget
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        if _redundant(plain, 0.3):  # the papers' fill kept a summary beside its own children
            repeated += 1
            # ... whose budget goes to the next hits, in score order.
            assert {h.node.node_id for h in hits} - {h.node.node_id for h in plain}
        else:
            assert hits == plain
    assert repeated


def test_drop_redundant_keeps_a_summary_whose_children_are_elsewhere(tree) -> None:  # type: ignore[no-untyped-def]
    store, emb, _ = tree
    v = emb.embed_query("rockets orbit")
    summaries = collapsed_tree(store, v, SearchFilter(tree="t", min_layer=1), max_tokens=600)
    assert summaries
    assert summaries == collapsed_tree(
        store, v, SearchFilter(tree="t", min_layer=1), max_tokens=600, rule=PAPERS_FILL
    )


def test_traversal_takes_a_text_held_twice_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A summary over a file and its copy (``hr/report.txt``, ``archive/report.txt``): traversal
    took both copies' leaf, the same text twice in the context."""
    from tests.contracts.test_node_store import DIM, MODEL, make_node, unit_vectors
    from tests.unit.retriever.test_budget import copy_of

    leaf = make_node("a", source="hr/report.txt", n_tokens=30)
    copy = copy_of(make_node("b", source="archive/report.txt", n_tokens=30), of=leaf)
    other = make_node("c", source="hr/other.txt", n_tokens=30)
    kids = (leaf.node_id, copy.node_id, other.node_id)
    top = make_node("s", layer=1, sources=["hr/report.txt", "archive/report.txt"], n_tokens=30)
    top = top.model_copy(update={"children": kids})
    with EdgeNodeStore(tmp_path / "s") as store:
        store.ensure_collection(DIM, MODEL)
        vectors = unit_vectors(4, seed=7)
        store.upsert([leaf, copy, other, top], vectors)
        hits = tree_traversal(store, vectors[0], SearchFilter(tree="t1"), top_k=3, max_tokens=1000)
    texts = [h.node.content_hash for h in hits]
    assert len(texts) == len(set(texts)) == 3, [h.node.source for h in hits]
