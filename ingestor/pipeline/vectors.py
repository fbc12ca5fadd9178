"""Node vectors on the build's and recovery's paths: the store is where they live.

A first build embeds its leaves in batches and stores each batch as it goes, so a build killed
half-way resumes with the vectors already stored; recovery and reconciliation read vectors back
from the store and embed a node's text again only where the store lost its point; an update that
removes a source and adds one with the same text (a rename) takes the removed leaves' vectors
back instead of embedding them again (:func:`reuse_removed`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ingestor.tree.params import Progress
from ingestor.tree.state import Node, TreeState
from retriever import Embedder, NodeStore, StoreError

log = logging.getLogger(__name__)

__all__ = ["EMBED_BATCH", "ReusingEmbedder", "embed_leaves", "reuse_removed", "vectors_of"]

EMBED_BATCH = 128


def embed_leaves(
    state: TreeState,
    leaves: list[Node],
    *,
    store: NodeStore,
    embedder: Embedder,
    tree: str,
    progress: Progress,
    checkpoint: bool,
) -> int:
    """Embed the leaves into ``state``; return how many were embedded (not reused).

    ``checkpoint`` (a first build, which has no committed state to fall back on): each batch is
    stored as it is embedded, and leaves whose point an interrupted build already stored (same
    id, so same source and text) take their vector from the store instead of the model, so a
    first build killed or stopped half-way resumes without redoing that work.
    """
    done: set[str] = set()
    if checkpoint:
        store.ensure_collection(embedder.dim, embedder.model_id)
        done = set(store.iter_ids(tree)) & {n.node_id for n in leaves}
    embedded = 0
    state.vectors.reserve(len(leaves), embedder.dim)  # one matrix of leaf vectors, never grown
    for start in range(0, len(leaves), EMBED_BATCH):
        batch = leaves[start : start + EMBED_BATCH]
        todo = [n for n in batch if n.node_id not in done]
        kept = [n for n in batch if n.node_id in done]
        if kept:
            vecs = store.retrieve_vectors([n.node_id for n in kept])
            for node, vec in zip(kept, vecs, strict=True):
                state.vectors[node.node_id] = vec
        if todo:
            vecs = embedder.embed_documents([n.text for n in todo])
            for node, vec in zip(todo, vecs, strict=True):
                state.vectors[node.node_id] = vec
            embedded += len(todo)
        for node in batch:
            state.nodes[node.node_id] = node
        if checkpoint and todo:
            ids = [n.node_id for n in todo]
            store.upsert(state.payloads(ids), state.matrix(ids))
        progress("embed leaves", start + len(batch), len(leaves))
    if done:
        log.info("resumed an interrupted build: %d leaf vectors taken from the store", len(done))
    return embedded


def vectors_of(
    state: TreeState, ids: list[str], *, store: NodeStore, embedder: Embedder
) -> NDArray[np.float32]:
    """Return the vectors of nodes, embedding their texts again where the store lost them."""
    if state.vectors.fetch is None:
        state.vectors.fetch = store.retrieve_vectors
    try:
        return state.matrix(ids)
    except StoreError:
        lost = []
        for node_id in ids:
            if node_id in state.vectors:
                continue
            try:
                state.vectors[node_id] = store.retrieve_vectors([node_id])[0]
            except StoreError:
                lost.append(node_id)
        vecs = embedder.embed_documents([state.nodes[i].text for i in lost])
        for node_id, vec in zip(lost, vecs, strict=True):
            state.vectors[node_id] = vec
        return state.matrix(ids)


def reuse_removed(state: TreeState, gone: list[str], embedder: Embedder) -> Embedder:
    """Return an embedder for an update removing the sources ``gone``: it gives the vectors of
    their leaves back for texts that come back (a renamed or moved file) and embeds the rest
    with ``embedder``; ``embedder`` itself when those leaves have no vector to give.

    Leaf ids include the source path, so a moved file's leaves get new ids; their vectors need
    not be paid for again. Vectors the store lost (after a crash) are not reused: those texts
    are embedded again.
    """
    old = [
        node
        for source in gone
        for node_id in getattr(state.sources.peek(source), "node_ids", ())
        if (node := state.nodes.peek(node_id)) is not None
    ]
    try:
        vectors = state.matrix([n.node_id for n in old])
    except StoreError as exc:  # points missing after a crash: embed those texts again
        log.info("cannot reuse the vectors of removed leaves (%s); embedding them", exc)
        vectors = np.zeros((0, embedder.dim), dtype=np.float32)
    known: dict[str, NDArray[np.float32]] = {}
    for node, vec in zip(old, vectors, strict=False):
        known[node.text] = vec
    return ReusingEmbedder(embedder, known) if known else embedder


class ReusingEmbedder:
    """An embedder that returns known vectors for known texts and embeds only the rest.

    Attributes:
        inner: embeds the texts not in ``known``.
        known: vectors by text.
        reused: how many texts were given a known vector so far.
    """

    def __init__(self, inner: Embedder, known: dict[str, NDArray[np.float32]]) -> None:
        self.inner = inner
        self.known = known
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.reused = 0

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo = [i for i, t in enumerate(texts) if t not in self.known]
        if todo:
            out[todo] = self.inner.embed_documents([texts[i] for i in todo])
        for i, text in enumerate(texts):
            if text in self.known:
                out[i] = self.known[text]
        self.reused += len(texts) - len(todo)
        if self.reused:
            log.debug("reused %d leaf vectors of removed sources", len(texts) - len(todo))
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.inner.embed_query(text)
