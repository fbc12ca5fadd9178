"""The pipeline's parts: a rename's vectors are reused through an explicit embedder, and the store
given to the Pipeline is the one every stage writes to, read where it lives (nothing forwards it,
nothing replaces it). Real qdrant-edge, hashed embeddings; few leaves, so no layer is clustered."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.pipeline.vectors import ReusingEmbedder, reuse_removed
from ingestor.tree.build import TreeBuilder, TreeParams
from models_store import ModelStore
from retriever import NodeStore
from retriever.edge_store import EdgeNodeStore
from testkit.fakes import EchoSummarizer, HashEmbedder

TEXTS = {
    "a.txt": "The orchard apples ripen in autumn. Farmers press cider from the harvest.",
    "b.txt": "Rockets burn liquid fuel to reach orbit. The launch window opens at dawn.",
    "c.txt": "The violin section tuned their strings. The concert began in the old hall.",
}


class CountingEmbedder(HashEmbedder):
    """Counts the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(dim=16)
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.texts.extend(texts)
        return super().embed_documents(texts)


class CountingStore:
    """A node store that counts the points upserted through it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.upserted = 0

    def upsert(self, payloads: Any, vectors: Any) -> None:
        self.upserted += len(payloads)
        self.inner.upsert(payloads, vectors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def built(
    tmp_path: Path, store: NodeStore | None = None
) -> tuple[Pipeline, CountingEmbedder, Path]:
    emb = CountingEmbedder()
    builder = TreeBuilder(
        emb, EchoSummarizer(), lambda: TreeClusterer(random_state=0), TreeParams()
    )
    p = Pipeline(
        tree="t",
        embedder=emb,
        builder=builder,
        store=store or EdgeNodeStore(tmp_path / "qdrant"),
        models=ModelStore(tmp_path / "models"),
        chunk_tokens=40,
        chunk_overlap=0,
    )
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in TEXTS.items():
        (root / name).write_text(text)
    p.build(root)
    return p, emb, root


def test_a_renamed_file_takes_its_leaf_vectors_back_instead_of_embedding_them_again(
    tmp_path: Path,
) -> None:
    p, emb, root = built(tmp_path)
    (root / "a.txt").rename(root / "moved.txt")
    emb.texts.clear()
    report = p.reconcile(root)
    assert (report.files_added, report.files_removed, report.files_moved) == (0, 0, 1)
    assert emb.texts == [], "the moved file's leaves were embedded again"
    state = p.require_state()
    assert "moved.txt" in state.sources
    assert "a.txt" not in state.sources
    assert p.context.embedder is emb, "the pipeline's embedder is never swapped"


def test_reuse_removed_gives_the_removed_leaves_vectors_for_texts_that_come_back(
    tmp_path: Path,
) -> None:
    p, emb, _ = built(tmp_path)
    state = p.require_state()
    reusing = reuse_removed(state, ["a.txt"], emb)
    assert isinstance(reusing, ReusingEmbedder)
    leaf = state.nodes[state.sources["a.txt"].node_ids[0]]
    emb.texts.clear()
    got = reusing.embed_documents([leaf.text, "a text never seen"])
    assert emb.texts == ["a text never seen"]
    assert np.allclose(got[0], state.matrix([leaf.node_id])[0])
    assert reuse_removed(state, [], emb) is emb, "nothing removed: the embedder itself"


def test_the_store_given_to_the_pipeline_is_the_one_every_stage_writes_to(
    tmp_path: Path,
) -> None:
    """The daemon builds its pipeline over the locked store: the stages read it from the
    pipeline's context, the one place it lives."""
    counting = CountingStore(EdgeNodeStore(tmp_path / "qdrant"))
    p, _, root = built(tmp_path, counting)
    assert p.context.store is counting
    assert counting.upserted > 0, "the build stage wrote past the given store"
    before = counting.upserted
    (root / "d.txt").write_text("Glaciers carve valleys slowly. Ice moves downhill.")
    p.update([root / "d.txt"])
    assert counting.upserted > before, "the apply stage wrote past the given store"
    before = counting.upserted
    p.rebuild()
    assert counting.upserted > before, "the rebuild wrote past the given store"


def test_the_pipeline_forwards_nothing() -> None:
    """Each setting and adapter is read from the part that owns it (``p.context.store``,
    ``p.collector.unread``, ``p.apply_stage.drift_threshold``): no property of the Pipeline
    forwards one, or lets a caller replace it after construction."""
    forwarded = sorted(k for k, v in vars(Pipeline).items() if isinstance(v, property))
    assert forwarded == []
