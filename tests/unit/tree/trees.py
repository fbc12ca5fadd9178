"""Small trees for adRAP unit tests: leaves in a TreeState, scripted or real clusterers."""

from __future__ import annotations

from collections.abc import Callable, MutableSequence
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.gmm import GaussianParams, to_sklearn
from ingestor.cluster.two_step import LocalModel, TreeClusterer
from ingestor.tree.build import Clusterer, TreeBuilder, TreeParams
from ingestor.tree.state import Node, SourceEntry, TreeState, leaf_id, sha256_text
from testkit.fakes import ByteTokenizer, EchoSummarizer, HashEmbedder

EMBEDDER = HashEmbedder(dim=48)


def add_leaves(state: TreeState, texts: list[str], prefix: str = "f") -> list[str]:
    """Add one leaf per text, each from its own source ``{prefix}{i}.txt``; return their ids."""
    vecs = EMBEDDER.embed_documents(texts)
    ids = []
    start = len(state.sources)
    for i, (text, vec) in enumerate(zip(texts, vecs, strict=True)):
        source = f"{prefix}{start + i}.txt"
        nid = leaf_id(state.tree, source, sha256_text(text), 0)
        state.nodes[nid] = Node(
            nid, 0, text, len(text.split()), sha256_text(text), frozenset({source}), source=source
        )
        state.vectors[nid] = vec
        state.sources[source] = SourceEntry(sha256_text(text), 1, 0.0, [nid])
        ids.append(nid)
    return ids


def drop_sources(state: TreeState, leaf_ids: list[str]) -> None:
    """Forget the sources of leaves about to be removed (TreeUpdater removes the nodes)."""
    for nid in leaf_ids:
        source = state.nodes[nid].source
        assert source is not None
        del state.sources[source]


def new_state(texts: list[str]) -> tuple[TreeState, list[str]]:
    state = TreeState(tree="t", root="/r", embed_model=EMBEDDER.model_id, dim=EMBEDDER.dim)
    return state, add_leaves(state, texts)


def make_builder(make_clusterer: Callable[[], Clusterer], **params: float) -> TreeBuilder:
    return TreeBuilder(
        EMBEDDER,
        EchoSummarizer(),
        make_clusterer,
        TreeParams(summary_max_tokens=40, **params),  # type: ignore[arg-type]
        ByteTokenizer(),
    )


def real_clusterer() -> TreeClusterer:
    return TreeClusterer(random_state=0, n_epochs=50)


class ScriptedClusterer:
    """One global cluster whose local GMM has the clusters ``script(n)`` gives (soft, possibly
    identical); its local "UMAP" is the first two coordinates, so tests know where points land."""

    threshold = 0.1
    random_state = 0
    local_n_neighbors = 10
    n_components = 2

    def __init__(self, script: Callable[[int], list[tuple[int, ...]]]) -> None:
        self.script = script
        self.clusters_: list[tuple[int, ...]] = []

    def fit(
        self, X: NDArray[np.float32], *, local_models: MutableSequence[Any] | None = None
    ) -> Self:
        n = len(X)
        self.clusters_ = self.script(n)
        Y = self.transform_local(0, X)
        means, covs = [], []
        for rows in self.clusters_:
            Yc = Y[list(rows)].astype(np.float64)
            means.append(Yc.mean(axis=0))
            covs.append(np.cov(Yc.T) + 1e-3 * np.eye(2) if len(rows) > 1 else 1e-3 * np.eye(2))
        w = np.array([len(c) for c in self.clusters_], dtype=np.float64)
        gmm = to_sklearn(GaussianParams(w / w.sum(), np.array(means), np.array(covs)))
        ids = tuple(range(len(self.clusters_)))
        self.local_models_ = [] if local_models is None else local_models
        self.local_models_.append(LocalModel(np.arange(n), None, gmm, Y, ids))
        self.n_clusters_ = len(self.clusters_)
        return self

    def predict_global(self, X: NDArray[np.floating]) -> NDArray[np.intp]:
        return np.zeros(len(X), dtype=np.intp)

    def transform_local(self, g: int, X: NDArray[np.floating]) -> NDArray[np.float32]:
        return np.ascontiguousarray(np.asarray(X, dtype=np.float32)[:, :2])


def scripted(*scripts: Callable[[int], list[tuple[int, ...]]]) -> Callable[[], Clusterer]:
    """Return a ``make_clusterer`` giving one ScriptedClusterer per layer, in order."""
    todo = list(scripts)
    return lambda: ScriptedClusterer(todo.pop(0) if len(todo) > 1 else todo[0])


def one_cluster(n: int) -> list[tuple[int, ...]]:
    return [tuple(range(n))]
