"""Node vectors on the build's and recovery's paths: the store is where they live.

A first build embeds its leaves in batches and stores each batch as it goes, so a build killed
half-way resumes with the vectors already stored; recovery and reconciliation read vectors back
from the store and embed a node's text again only where the store lost its point.
"""

from __future__ import annotations

import logging

import numpy as np
from numpy.typing import NDArray

from ingestor.tree.params import Progress
from ingestor.tree.state import Node, TreeState
from retriever import Embedder, NodeStore, StoreError

log = logging.getLogger(__name__)

__all__ = ["EMBED_BATCH", "embed_leaves", "vectors_of"]

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
