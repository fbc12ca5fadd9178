"""Small generated documents on five topics, and the fast pipeline the watcher tests (and
bench/access.py) run them through: hashed embeddings and echo summaries beside the real
TreeClusterer and qdrant-edge, the store behind the daemon's lock (so the pipeline may be handed
to :func:`testkit.daemons.make_daemon` as built)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.pipeline.access import TreeAccess
from ingestor.pipeline.unread import Unread
from ingestor.service.concurrency import lock_store
from ingestor.tree.build import TreeBuilder, TreeParams
from models_store import ModelStore
from retriever import NodeStore
from retriever.edge_store import EdgeNodeStore
from testkit.fakes import CountingEmbedder, EchoSummarizer

TOPICS = [
    "the orchard apples ripen in autumn and farmers press cider from the harvest",
    "rockets burn liquid fuel to reach orbit and the launch window opens at dawn",
    "the violin section tuned their strings before the concert in the old hall",
    "glaciers carve valleys slowly as ice moves downhill under its own weight",
    "the court heard arguments about the contract and the judge reserved judgment",
]


def doc_text(rng: random.Random, n_sentences: int) -> str:
    topic = rng.choice(TOPICS)
    words = topic.split()
    out = []
    for i in range(n_sentences):
        rng.shuffle(words)
        out.append(f"{' '.join(words).capitalize()} number {rng.randint(0, 10**6)} item {i}.")
    return " ".join(out)


def make_pipeline(
    tmp: Path,
    summarizer: EchoSummarizer | None = None,
    *,
    store: NodeStore | None = None,
    unread: Unread | None = None,
    drift_threshold: float = 100.0,
    defer_summaries: Callable[[], bool] | None = None,
    params: TreeParams | None = None,
    access: TreeAccess | None = None,
    chunk_tokens: int = 40,
) -> Pipeline:
    """Return the fast pipeline over ``store`` (an embedded shard in ``tmp/state`` by default)
    behind the daemon's lock per call (:func:`~ingestor.service.concurrency.lock_store`);
    ``params``: the tree's (default: 40-token summaries, every change regenerates);
    ``chunk_tokens``: the leaves' size (overlap 8)."""
    emb = CountingEmbedder()
    builder = TreeBuilder(
        emb,
        summarizer or EchoSummarizer(),
        lambda: TreeClusterer(random_state=0, n_epochs=50),
        params or TreeParams(summary_max_tokens=40),
    )
    return Pipeline(
        tree="t",
        embedder=emb,
        builder=builder,
        store=lock_store(store or EdgeNodeStore(tmp / "state" / "qdrant")),
        models=ModelStore(tmp / "state" / "models"),
        chunk_tokens=chunk_tokens,
        chunk_overlap=8,
        drift_threshold=drift_threshold,
        unread=unread,
        defer_summaries=defer_summaries,
        access=access,
    )
