"""A build's memory: documents' texts are not held past their chunking, and the leaves are
clustered on the one matrix of their vectors, not on a copy. Real qdrant-edge, hashed
embeddings."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.pipeline.chunker import Chunker
from ingestor.pipeline.vectors import LeafEmbedding
from ingestor.read.documents import Document
from ingestor.tree.build import TreeBuilder, TreeParams
from models_store import ModelStore
from retriever.edge_store import EdgeNodeStore
from testkit.fakes import EchoSummarizer, HashEmbedder
from tests.unit.tree.test_adrap import write_corpus


def _instances(cls: type) -> list[object]:
    """Every live object of ``cls``. ``issubclass(type(o), cls)``, not ``isinstance``: that reads
    each object's ``__class__``, which warns (an error here) on torch's deprecated ``reduce_op``
    once an earlier test in this process imported torch."""
    return [o for o in gc.get_objects() if issubclass(type(o), cls)]


def _pipeline(tmp_path: Path) -> Pipeline:
    emb = HashEmbedder(dim=16)
    make = lambda: TreeClusterer(random_state=0, n_epochs=20)  # noqa: E731
    return Pipeline(
        tree="t",
        embedder=emb,
        builder=TreeBuilder(emb, EchoSummarizer(), make, TreeParams(summary_max_tokens=40)),
        store=EdgeNodeStore(tmp_path / "qdrant"),
        models=ModelStore(tmp_path / "models"),
        chunk_tokens=40,
        chunk_overlap=8,
    )


def test_a_build_holds_one_documents_text_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a document's leaves are embedded, every document read before it is gone (their
    leaves carry the text); the one just read is held by the reader until the next read."""
    import random

    write_corpus(tmp_path / "docs", random.Random(3), 12)
    read: list[weakref.ref[Document]] = []
    leaves_of = Chunker.__call__

    def chunk(self: Chunker, doc: Document) -> Any:
        read.append(weakref.ref(doc))
        return leaves_of(self, doc)

    alive: list[int] = []
    add = LeafEmbedding.add

    def embed(self: LeafEmbedding, leaves: Any) -> None:
        gc.collect()
        alive.append(sum(ref() is not None for ref in read))
        add(self, leaves)

    monkeypatch.setattr(Chunker, "__call__", chunk)
    monkeypatch.setattr(LeafEmbedding, "add", embed)
    report = _pipeline(tmp_path).build(tmp_path / "docs")
    assert report.files == len(read) == len(alive) == 12
    assert max(alive) <= 1, f"{max(alive)} of 12 documents held while leaves were embedded"


def test_the_first_layer_is_fitted_on_the_matrix_of_leaf_vectors_not_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    write_corpus(tmp_path / "docs", random.Random(4), 10)
    fitted: list[np.ndarray] = []
    fit = TreeClusterer.fit

    def recording(self: TreeClusterer, X: Any, **kwargs: Any) -> Any:
        fitted.append(X)
        return fit(self, X, **kwargs)

    monkeypatch.setattr(TreeClusterer, "fit", recording)
    p = _pipeline(tmp_path)
    p.build(tmp_path / "docs")
    leaves = fitted[0]
    assert not leaves.flags.writeable, "the leaves were clustered on a stacked copy"
    assert leaves.base is not None
    assert leaves.base.shape[0] >= len(leaves)
    assert len(p.require_state().ids_in_layer(0)) == len(leaves)


def test_a_build_lets_go_of_every_layer_it_built(tmp_path: Path) -> None:
    """The layers' reference cycles are collected before the heap is handed back to the OS."""
    import random

    from ingestor.cluster.adaptive import AdaptiveLayer

    write_corpus(tmp_path / "docs", random.Random(5), 10)
    p = _pipeline(tmp_path)
    gc.collect()
    gc.disable()  # what the build leaves behind, not what a later collection would find
    try:
        p.build(tmp_path / "docs")
        held = _instances(AdaptiveLayer)
    finally:
        gc.enable()
    assert held == [], f"{len(held)} layers of the built tree still in memory"


def test_the_leaves_of_a_document_share_one_set_of_sources_and_of_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two frozensets a leaf cost ~420 bytes a leaf of a build's memory; one pair per document."""
    import random

    write_corpus(tmp_path / "docs", random.Random(5), 6)
    held: list[Any] = []
    add = LeafEmbedding.add

    def embed(self: LeafEmbedding, leaves: Any) -> None:
        held.extend(leaves)  # the leaves the build holds until it lets its state go
        add(self, leaves)

    monkeypatch.setattr(LeafEmbedding, "add", embed)
    _pipeline(tmp_path).build(tmp_path / "docs")
    by_source: dict[str, list[Any]] = {}
    for node in held:
        by_source.setdefault(node.source, []).append(node)
    assert len(by_source) == 6
    assert any(len(leaves) > 1 for leaves in by_source.values())
    for source, leaves in by_source.items():
        assert leaves[0].sources == {source}
        assert len({id(n.sources) for n in leaves}) == 1, source
        assert len({id(n.dirs) for n in leaves}) == 1, source


def _local_model_rows(p: Pipeline) -> dict[tuple[str, str], bytes]:
    rows = p.require_state().rows
    assert rows is not None
    n_layers = len(p.require_state().layers)
    return {(f"L{i}", k): v for i in range(n_layers) for k, v in rows.items(f"L{i}.local")}


def test_a_first_build_writes_each_local_model_out_as_it_is_fitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """None of a layer's local models is in memory when the layer is made from its fit (they
    were all, until the commit); the commit copies their bytes, and the state is the one a
    build that held them commits."""
    import random

    from ingestor.cluster.adaptive import AdaptiveLayer
    from ingestor.cluster.two_step import LocalModel
    from ingestor.pipeline.build import BuildStage

    write_corpus(tmp_path / "docs", random.Random(6), 12)
    alive: list[tuple[int, int]] = []
    from_fit = AdaptiveLayer.from_fit.__func__  # type: ignore[attr-defined]

    def made(cls: type[AdaptiveLayer], layer: int, clusterer: Any, *a: Any, **k: Any) -> Any:
        gc.collect()
        held = len(_instances(LocalModel))
        alive.append((len(clusterer.local_models_), held))
        return from_fit(cls, layer, clusterer, *a, **k)

    monkeypatch.setattr(AdaptiveLayer, "from_fit", classmethod(made))
    spilled = _pipeline(tmp_path / "a")
    spilled.build(tmp_path / "docs")
    assert alive
    assert alive[0][0] >= 2, alive  # layer 0 has several local models
    assert [held for _, held in alive] == [0] * len(alive), alive

    build_layers = BuildStage.build_layers
    monkeypatch.setattr(  # the same build, its models held until the commit
        BuildStage, "build_layers", lambda self, *a, spill, **k: build_layers(self, *a, **k)
    )
    alive.clear()
    held = _pipeline(tmp_path / "b")
    held.build(tmp_path / "docs")
    assert alive[0][1] >= alive[0][0] >= 2, alive  # the check above can fail
    assert _local_model_rows(spilled) == _local_model_rows(held)
    a, b = spilled.require_state(), held.require_state()
    assert [la.cluster_nodes.items() for la in a.layers] == [
        la.cluster_nodes.items() for la in b.layers
    ]
