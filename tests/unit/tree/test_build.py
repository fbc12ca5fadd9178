"""Tree mechanics (Algorithm 1) with fast fakes; the real clusterer is exercised in integration."""

from __future__ import annotations

from collections.abc import MutableSequence
from typing import Any, Self

import numpy as np
import pytest
from numpy.typing import NDArray

from ingestor.cluster.two_step import LocalModel
from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.invariants import violations
from ingestor.tree.state import Node, SourceEntry, TreeState, leaf_id, sha256_text
from testkit.fakes import ByteTokenizer, EchoSummarizer, HashEmbedder


class ConsecutiveClusterer:
    """Groups rows in runs of ``size`` (plus one soft overlap), standing in for UMAP + GMM.

    Each run is a "guarded" global cluster (no local GMM), the shape TreeClusterer gives tiny
    groups, so the adaptive layer built over it is well formed.
    """

    threshold = 0.1
    random_state = 0

    def __init__(self, size: int = 4, overlap: bool = False) -> None:
        self.size = size
        self.overlap = overlap
        self.clusters_: list[tuple[int, ...]] = []

    def fit(
        self, X: NDArray[np.float32], *, local_models: MutableSequence[Any] | None = None
    ) -> Self:
        n = len(X)
        self.clusters_ = [tuple(range(i, min(i + self.size, n))) for i in range(0, n, self.size)]
        self.local_models_ = [] if local_models is None else local_models
        self.local_models_.extend(
            LocalModel(np.array(c, dtype=np.intp), None, None, None, (fid,))
            for fid, c in enumerate(self.clusters_)
        )
        if self.overlap and len(self.clusters_) > 1:
            self.clusters_[1] = (self.clusters_[0][-1], *self.clusters_[1])
        self.n_clusters_ = len(self.clusters_)
        return self


def make_state(n_leaves: int, n_docs: int = 3) -> TreeState:
    emb = HashEmbedder()
    state = TreeState(tree="t", root="/r", embed_model=emb.model_id, dim=emb.dim)
    texts = [
        f"document {i % n_docs} says fact number {i} about topic {i // 5}" for i in range(n_leaves)
    ]
    vecs = emb.embed_documents(texts)
    for i, (text, vec) in enumerate(zip(texts, vecs, strict=True)):
        source = f"dir{i % n_docs}/doc{i % n_docs}.txt"
        nid = leaf_id("t", source, sha256_text(text), 0)
        state.nodes[nid] = Node(
            nid,
            0,
            text,
            len(text.split()),
            sha256_text(text),
            frozenset({source}),
            source=source,
            chunk_index=i,
        )
        state.vectors[nid] = vec
        state.sources.setdefault(source, SourceEntry("h", 1, 0.0, [])).node_ids.append(nid)
    return state


def builder(
    summarizer: EchoSummarizer, size: int = 4, overlap: bool = False, **params: int
) -> TreeBuilder:
    return TreeBuilder(
        HashEmbedder(),
        summarizer,
        lambda: ConsecutiveClusterer(size, overlap),
        TreeParams(**params),
        ByteTokenizer(),
    )


def test_layers_are_added_until_the_top_has_at_most_ten_nodes() -> None:
    state = make_state(100)
    builder(EchoSummarizer()).build(state)
    assert state.layer_counts() == {0: 100, 1: 25, 2: 7}
    assert violations(state) == []


def test_the_tree_stops_at_max_layers() -> None:
    state = make_state(200)
    builder(EchoSummarizer(), size=2, max_layers=3).build(state)
    assert max(state.layer_counts()) == 2


def test_summaries_carry_the_union_of_their_childrens_sources_and_parents_link_back() -> None:
    state = make_state(40)
    builder(EchoSummarizer(), overlap=True).build(state)
    # The fake's soft overlap is not in its (guarded) local models, so the adaptive layer does
    # not know the second membership: only that check is left out.
    assert [v for v in violations(state) if "clusters' summaries" not in v] == []
    soft = [n for n in state.nodes.values() if len(n.parents) > 1]
    assert soft, "the overlapping cluster should give one node two parents"
    top = [n for n in state.nodes.values() if n.layer == max(state.layer_counts())]
    assert frozenset().union(*(n.sources for n in top)) == frozenset(state.sources)


def test_a_rebuild_reuses_cached_summaries_of_unchanged_clusters() -> None:
    state = make_state(60)
    first = EchoSummarizer()
    builder(first).build(state)
    second = EchoSummarizer()
    stats = builder(second).build(state)
    assert second.calls == 0
    assert stats.cache_hits == first.calls


def test_a_small_tree_has_no_summary_layer() -> None:
    state = make_state(8)
    builder(EchoSummarizer()).build(state)
    assert state.layer_counts() == {0: 8}
    assert state.layers == []


def test_clusters_over_the_input_limit_are_split_until_they_fit() -> None:
    state = make_state(40)
    per_leaf = max(n.n_tokens for n in state.nodes.values())
    builder(EchoSummarizer(), size=20, max_input_tokens=per_leaf * 5).build(state)
    for node in state.nodes.values():
        if node.layer == 1:
            assert sum(state.nodes[c].n_tokens for c in node.children) <= per_leaf * 5


def test_payloads_follow_the_contract() -> None:
    state = make_state(30)
    builder(EchoSummarizer()).build(state)
    for p in state.payloads():
        assert p.tree == "t"
        if p.layer == 0:
            assert p.source is not None
            assert p.sources == (p.source,)
            assert p.source_dirs == (p.source.split("/")[0] + "/",)
        else:
            assert p.summarizer == "echo"
            assert p.children


@pytest.mark.parametrize("n", [11, 12, 13])
def test_every_leaf_has_a_parent_when_the_tree_has_more_than_ten_leaves(n: int) -> None:
    state = make_state(n)
    builder(EchoSummarizer()).build(state)
    assert all(node.parents for node in state.nodes.values() if node.layer == 0)
