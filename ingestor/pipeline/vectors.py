"""Node vectors on the build's and recovery's paths: the store is where they live.

A first build embeds its leaves in batches and keeps each batch in its checkpoint as it goes
(:mod:`ingestor.pipeline.checkpoint`), so a build killed half-way resumes with those vectors;
recovery and reconciliation read vectors back from the store and embed a node's text again only
where the store lost its point; an update that removes a source and adds one with the same text
(a rename) takes the removed leaves' vectors back instead of embedding them again
(:func:`reuse_removed`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from ingestor.pipeline.checkpoint import CheckpointVectors
from ingestor.pipeline.overlap import Behind
from ingestor.tree.params import Progress
from ingestor.tree.state import Node, TreeState
from retriever import Embedder, NodeStore, StoreError

log = logging.getLogger(__name__)

__all__ = [
    "EMBED_BATCH",
    "DedupingEmbedder",
    "LeafEmbedding",
    "ReusingEmbedder",
    "removed_leaf_texts",
    "reuse_removed",
    "vectors_of",
]

EMBED_BATCH = 128


class LeafEmbedding:
    """Embeds a build's leaves as they are read, :data:`EMBED_BATCH` at a time, into ``state``.

    The build hands it each document's leaves (:meth:`add`) while its worker processes read
    the next files, so reading and embedding overlap; :meth:`finish` embeds the last batch.
    Every leaf is then in ``state.nodes`` with its vector, in reading order.

    ``checkpoint`` (a first build, which has no committed state to fall back on): each batch's
    vectors are kept there as it is embedded (one small transaction), and leaves whose vector
    an interrupted build kept (same id, so same source and text) take it from there instead of
    the model, so a first build killed or stopped half-way resumes without redoing that work.
    Those writes run on a thread behind the embedding (:class:`~ingestor.pipeline.overlap.Behind`,
    at most two batches waiting): the next batch is embedded while SQLite writes the last one.
    :meth:`finish` (or :meth:`close`, on an error) waits for them. Nothing is written to the
    node store here (see :meth:`TreeContext.fill_store`).

    Attributes:
        leaves: leaves added so far.
        resumed: how many leaves took their vector from the checkpoint (not embedded).
        seconds: time spent embedding and checkpointing (not reading).
    """

    def __init__(
        self,
        state: TreeState,
        *,
        embedder: Embedder,
        progress: Progress,
        checkpoint: CheckpointVectors | None,
    ) -> None:
        self.state = state
        self.embedder = embedder
        self.progress = progress
        self.checkpoint = checkpoint
        self.kept = checkpoint.ids() if checkpoint is not None else set()
        self.pending: list[Node] = []
        self.leaves = 0
        self.resumed = 0
        self.seconds = 0.0
        self._writes = (
            Behind("checkpoint writes of the leaves' vectors") if checkpoint is not None else None
        )

    def add(self, leaves: Sequence[Node]) -> None:
        """Take one document's leaves; embed every full batch."""
        self.pending.extend(leaves)
        self.leaves += len(leaves)
        while len(self.pending) >= EMBED_BATCH:
            batch, self.pending = self.pending[:EMBED_BATCH], self.pending[EMBED_BATCH:]
            self._embed(batch)

    def finish(self) -> None:
        """Embed what is left."""
        if self.pending:
            batch, self.pending = self.pending, []
            self._embed(batch)
        t0 = time.perf_counter()
        self.close()  # every batch kept before the build goes on
        self.seconds += time.perf_counter() - t0
        self.progress("embed leaves", self.leaves, self.leaves)  # known now: the stage's end
        if self.resumed:
            log.info(
                "resumed an interrupted build: %d leaf vectors taken from its checkpoint",
                self.resumed,
            )

    def close(self) -> None:
        """Wait for the checkpoint writes submitted so far; raise the first one's error."""
        writes, self._writes = self._writes, None
        if writes is not None:
            writes.wait()

    def __enter__(self) -> LeafEmbedding:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        """Wait for the checkpoint writes; on an error, without raising theirs over it."""
        writes, self._writes = self._writes, None
        if writes is not None:
            writes.__exit__(kind, exc, tb)

    def _embed(self, batch: list[Node]) -> None:
        t0 = time.perf_counter()
        state = self.state  # its vectors: one matrix, grown by half when full
        todo = [n for n in batch if n.node_id not in self.kept]
        if len(todo) < len(batch) and self.checkpoint is not None:
            got = self.checkpoint.get(n.node_id for n in batch if n.node_id in self.kept)
            for node_id, vec in got.items():
                state.vectors[node_id] = vec
            todo = [n for n in batch if n.node_id not in got]
            self.resumed += len(got)
        if todo:
            vecs = np.asarray(self.embedder.embed_documents([n.text for n in todo]))
            for node, vec in zip(todo, vecs, strict=True):
                state.vectors[node.node_id] = vec
            if self.checkpoint is not None:  # the batch's own rows: the state's matrix grows
                if self._writes is None:
                    raise RuntimeError("LeafEmbedding: a batch added after finish() or close()")
                ids = [n.node_id for n in todo]
                self._writes.submit(self.checkpoint.put, ids, _rows_of(ids, vecs))
        for node in batch:
            state.nodes[node.node_id] = node
        self.seconds += time.perf_counter() - t0
        self.progress("embed leaves", self.leaves - len(self.pending), 0)


def _rows_of(
    ids: list[str], vecs: NDArray[np.float32]
) -> Callable[[list[str]], NDArray[np.float32]]:
    """``CheckpointVectors.put``'s ``vectors`` for ``ids`` whose rows are ``vecs``, in order."""
    at = {node_id: i for i, node_id in enumerate(ids)}
    return lambda part: vecs[[at[i] for i in part]]


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


def reuse_removed(
    state: TreeState,
    gone: list[str],
    embedder: Embedder,
    known: dict[str, NDArray[np.float32]] | None = None,
) -> Embedder:
    """Return an embedder for an update removing the sources ``gone``: it gives the vectors of
    their leaves back for texts that come back (a renamed or moved file), and those of
    ``known`` (texts embedded ahead, outside the writer's lock), and embeds the rest with
    ``embedder``; ``embedder`` itself when there is no vector to give.

    Leaf ids include the source path, so a moved file's leaves get new ids; their vectors need
    not be paid for again. Vectors the store lost (after a crash) are not reused: those texts
    are embedded again.
    """
    old = _removed_leaves(state, gone)
    try:
        vectors = state.matrix([n.node_id for n in old])
    except StoreError as exc:  # points missing after a crash: embed those texts again
        log.info("cannot reuse the vectors of removed leaves (%s); embedding them", exc)
        vectors = np.zeros((0, embedder.dim), dtype=np.float32)
    given: dict[str, NDArray[np.float32]] = dict(known or {})
    for node, vec in zip(old, vectors, strict=False):
        given[node.text] = vec
    return ReusingEmbedder(embedder, given) if given else embedder


def removed_leaf_texts(state: TreeState, gone: list[str]) -> set[str]:
    """The leaf texts of the sources ``gone``: those a document of the same update takes the
    vectors of (:func:`reuse_removed`) instead of embedding them."""
    return {node.text for node in _removed_leaves(state, gone)}


def _removed_leaves(state: TreeState, gone: list[str]) -> list[Node]:
    return [
        node
        for source in gone
        for node_id in getattr(state.sources.peek(source), "node_ids", ())
        if (node := state.nodes.peek(node_id)) is not None
    ]


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


#: Texts whose vectors :class:`DedupingEmbedder` keeps after embedding them (1.5 KB each at 384-d).
RECENT_TEXTS = 4096


class DedupingEmbedder:
    """An embedder that embeds each distinct text once: within a call, and across calls while the
    text is among the last :data:`RECENT_TEXTS` embedded.

    A share is full of copies (``report.docx`` and ``report (1).docx``, a file saved in two
    folders, its hard links): each copy's leaves are their own nodes, but one text has one
    vector. Twenty copies of a document cost twenty embeddings of every chunk (a build of them
    embedded 746 texts, 138 distinct); now one. Copies read near each other (one batch, or the
    batches around it) are embedded once; each gets the vector the model gave the first (a
    model's output for a text differs with its batch by float rounding at most).

    Attributes:
        inner: embeds the texts not seen lately.
        reused: how many texts were given a vector already computed.
    """

    def __init__(self, inner: Embedder, keep: int = RECENT_TEXTS) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.keep = keep
        self.reused = 0
        self._recent: OrderedDict[bytes, NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        keys = [_text_key(t) for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        todo: dict[bytes, list[int]] = {}
        with self._lock:
            for i, key in enumerate(keys):
                vec = self._recent.get(key)
                if vec is None:
                    todo.setdefault(key, []).append(i)
                else:
                    out[i] = vec
                    self._recent.move_to_end(key)
        if todo:
            firsts = [texts[rows[0]] for rows in todo.values()]
            vecs = np.asarray(self.inner.embed_documents(firsts), dtype=np.float32)
            with self._lock:
                for (key, rows), vec in zip(todo.items(), vecs, strict=True):
                    out[rows] = vec
                    self._recent[key] = vec.copy()
                while len(self._recent) > self.keep:
                    self._recent.popitem(last=False)
        self.reused += len(texts) - len(todo)
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.inner.embed_query(text)


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
