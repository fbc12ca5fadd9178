"""postQFRAP, Algorithm 3 of [A] §5: a query-focused tree over the k0 retrieved nodes, per query.

1. Retrieve k0 nodes for the question with a base retriever (leaves, collapsed or traversal), with
   no token limit.
2. While the top layer has more than ``min_top_nodes`` nodes (and fewer than ``max_layers``
   layers): cluster it in ONE step (local UMAP + GMM by BIC, :func:`cluster_one_step`) and write a
   query-focused summary of each cluster; the summaries are the next layer.
3. One final query-focused summary of the whole top layer, at most ``tau`` tokens: the context.

Nothing is stored. With the extractive summariser every sentence of the context is a sentence of a
retrieved node, so each part maps to an exact file span; with an LLM the final summary maps to all
retrieved nodes (the paper's own caveat: generated summaries are harder to trace).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from ingestor.answer.modes import BASES
from ingestor.answer.provenance import ContextPart, SpanResolver, merge_spans
from ingestor.cluster.one_step import cluster_one_step
from ingestor.errors import SummarizationError
from ingestor.protocols import Summarizer
from ingestor.read.tokens import Tokenizer, default_tokenizer
from ingestor.summarize.extractive import truncate
from ingestor.summarize.query_focused import (
    QueryFocusedExtractiveSummarizer,
    Sentence,
    split_units,
)
from retriever import Embedder, NodeStore, ScoredNode, SearchFilter, tree_traversal

log = logging.getLogger(__name__)

__all__ = ["PostQFRAP", "QFResult", "retrieve_k0"]


def retrieve_k0(
    store: NodeStore,
    vector: NDArray[np.float32],
    flt: SearchFilter,
    *,
    base: str,
    k0: int,
    top_k: int = 5,
    text: str | None = None,
) -> list[ScoredNode]:
    """Return the k0 nodes of the base retriever, best first, with no token limit (``leaves`` and
    ``collapsed`` hybrid given the question's ``text``, where the store has BM25 vectors).

    ``leaves``: the k0 nearest leaves (naive RAG, the paper's choice). ``collapsed``: the k0
    nearest nodes of any layer. ``traversal``: top-k traversal, its best k0 nodes.

    Raises:
        ValueError: an unknown base or k0 < 1.
    """
    if k0 < 1:
        raise ValueError(f"k0 must be at least 1, got {k0}")
    hybrid = {} if text is None else {"text": text}
    if base == "leaves":
        return store.search(vector, replace(flt, min_layer=None, max_layer=0), k0, **hybrid)
    if base == "collapsed":
        return store.search(vector, flt, k0, **hybrid)
    if base == "traversal":
        # dense: a hybrid traversal measured worse (docs/retrieval.md)
        return tree_traversal(store, vector, flt, top_k=top_k, max_tokens=2**62)[:k0]
    raise ValueError(f"base must be one of {', '.join(BASES)}, not {base!r}")


@dataclass
class QFResult:
    """The context postQFRAP made for one question.

    Attributes:
        context: the final summary (at most ``tau`` tokens).
        n_tokens: its tokens (cl100k_base).
        parts: the context split by origin, each with its nodes and spans.
        retrieved: the k0 nodes it was made from, best first.
        layers: layers of the query-focused tree (1 = no clustering was needed).
        calls: summaries written (the final one included).
        prompt_tokens: LLM prompt tokens (0 for the extractive summariser).
        completion_tokens: LLM completion tokens.
        seconds: wall time of steps 2-3 (retrieval excluded).
    """

    context: str
    n_tokens: int
    parts: list[ContextPart]
    retrieved: list[ScoredNode]
    layers: int
    calls: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    summarizer: str = ""


@dataclass
class _Node:
    text: str
    origins: frozenset[int]  # indices into the retrieved nodes
    units: list[Sentence] | None  # extractive only: the sentences, with their origin


class PostQFRAP:
    """Algorithm 3 with a given summariser.

    Args:
        summarizer: a query-focused capable summariser; a
            :class:`QueryFocusedExtractiveSummarizer` keeps sentence-level provenance.
        embedder: embeds summaries when another clustering round needs them.
        tau: token budget of the final summary (the paper's 2000).
        summary_tokens: budget of each intermediate cluster summary.
        min_top_nodes: cluster again while the top layer has more nodes than this (Algorithm 1's 10).
        max_layers: at most this many layers (leaves included).
        random_state: seed of the clustering.
        tokenizer: counts tau (cl100k_base).
    """

    def __init__(
        self,
        summarizer: Summarizer,
        embedder: Embedder,
        *,
        tau: int = 2000,
        summary_tokens: int = 500,
        min_top_nodes: int = 10,
        max_layers: int = 5,
        random_state: int | None = 0,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        if tau < 1 or summary_tokens < 1:
            raise ValueError(f"tau and summary_tokens must be ≥ 1, got {tau}, {summary_tokens}")
        self.summarizer = summarizer
        self.embedder = embedder
        self.tau = tau
        self.summary_tokens = summary_tokens
        self.min_top_nodes = min_top_nodes
        self.max_layers = max_layers
        self.random_state = random_state
        self.tokenizer = tokenizer or default_tokenizer()

    @property
    def extractive(self) -> bool:
        return isinstance(self.summarizer, QueryFocusedExtractiveSummarizer)

    def run(
        self,
        question: str,
        retrieved: Sequence[ScoredNode],
        vectors: NDArray[np.float32],
        resolver: SpanResolver,
    ) -> QFResult:
        """Build the query-focused tree over ``retrieved`` and return the final context.

        Args:
            question: the question.
            retrieved: the k0 retrieved nodes (any layers).
            vectors: (k0, dim) their embeddings, as stored.
            resolver: finds file spans of the context's sentences.

        Raises:
            SummarizationError: a summary failed (nothing partial is returned).
        """
        t0 = time.perf_counter()
        calls0, prompt0, completion0 = self._counters()
        retrieved = list(retrieved)
        if not retrieved:
            return QFResult("", 0, [], [], 0, 0, summarizer=self.summarizer.id)
        order = sorted(range(len(retrieved)), key=lambda i: _reading_order(retrieved[i]))
        retrieved = [retrieved[i] for i in order]
        vectors = np.asarray(vectors)[order]
        layer = [self._leaf(i, hit) for i, hit in enumerate(retrieved)]
        layer = [n for n in layer if n.text.strip()]
        layers = 1
        layer_vectors: NDArray[np.float32] | None = vectors
        while len(layer) > self.min_top_nodes and layers < self.max_layers:
            if layer_vectors is None:
                layer_vectors = self.embedder.embed_documents([n.text for n in layer])
            clusters = cluster_one_step(layer_vectors, random_state=self.random_state)
            if len(clusters) >= len(layer):  # no reduction: another round would loop forever
                break
            layer = self._summarize([[layer[i] for i in c] for c in clusters], question)
            layer_vectors = None
            layers += 1
        final = self._final(layer, question)
        calls, prompt, completion = self._counters()
        parts = self._parts(final, retrieved, resolver)
        return QFResult(
            context=final.text,
            n_tokens=len(self.tokenizer.encode(final.text)),
            parts=parts,
            retrieved=retrieved,
            layers=layers,
            calls=calls - calls0,
            prompt_tokens=prompt - prompt0,
            completion_tokens=completion - completion0,
            seconds=time.perf_counter() - t0,
            summarizer=self.summarizer.id,
        )

    def _counters(self) -> tuple[int, int, int]:
        s = self.summarizer
        return (
            int(getattr(s, "calls", 0)),
            int(getattr(s, "prompt_tokens", 0)),
            int(getattr(s, "completion_tokens", 0)),
        )

    def _leaf(self, index: int, hit: ScoredNode) -> _Node:
        units = split_units([hit.node.text], [index]) if self.extractive else None
        return _Node(hit.node.text, frozenset([index]), units)

    def _summarize(self, groups: list[list[_Node]], question: str) -> list[_Node]:
        origins = [frozenset().union(*(n.origins for n in g)) for g in groups]
        if isinstance(self.summarizer, QueryFocusedExtractiveSummarizer):
            unit_groups = [[u for n in g for u in n.units or ()] for g in groups]
            picked = self.summarizer.select(
                unit_groups, query=question, max_tokens=self.summary_tokens
            )
            return [
                _Node(self.summarizer.join(p), o, p) for p, o in zip(picked, origins, strict=True)
            ]
        texts = self.summarizer.summarize_many(
            [[n.text for n in g] for g in groups], max_tokens=self.summary_tokens, query=question
        )
        return [_Node(t, o, None) for t, o in zip(texts, origins, strict=True)]

    def _final(self, layer: list[_Node], question: str) -> _Node:
        if isinstance(self.summarizer, QueryFocusedExtractiveSummarizer):
            units = [u for n in layer for u in n.units or ()]
            (picked,) = self.summarizer.select([units], query=question, max_tokens=self.tau)
            origins = frozenset(u.origin for u in picked)
            return _Node(self.summarizer.join(picked), origins, picked)
        (text,) = self.summarizer.summarize_many(
            [[n.text for n in layer]], max_tokens=self.tau, query=question
        )
        if len(self.tokenizer.encode(text)) > self.tau:
            # The model counts its own tokens; the budget is in cl100k_base tokens.
            log.info("final summary over %d tokens; cut to fit", self.tau)
            text = truncate(text, self.tau, self.tokenizer)
            if not text:
                raise SummarizationError(f"the final summary does not fit tau={self.tau} tokens")
        return _Node(text, frozenset().union(*(n.origins for n in layer)), None)

    def _parts(
        self, final: _Node, retrieved: list[ScoredNode], resolver: SpanResolver
    ) -> list[ContextPart]:
        if final.units is None:
            nodes = [retrieved[i].node for i in sorted(final.origins)]
            spans = merge_spans(s for n in nodes for s in resolver.spans_of(n))
            return [ContextPart(final.text, tuple(n.node_id for n in nodes), spans)]
        parts: list[ContextPart] = []
        run: list[Sentence] = []
        for unit in [*final.units, None]:
            if run and (unit is None or not _continues(run[-1], unit, retrieved)):
                node = retrieved[run[0].origin].node
                text = QueryFocusedExtractiveSummarizer.join(run)
                found = [s for u in run for s in resolver.locate(node, u.text, u.start)]
                parts.append(ContextPart(text, (node.node_id,), merge_spans(found)))
                run = []
            if unit is not None:
                run.append(unit)
        return parts


def _continues(prev: Sentence, unit: Sentence, retrieved: list[ScoredNode]) -> bool:
    """True when ``unit`` directly follows ``prev`` in the same node (only whitespace between)."""
    if unit.origin != prev.origin:
        return False
    text = retrieved[unit.origin].node.text
    return unit.start >= prev.end and not text[prev.end : unit.start].strip()


def _reading_order(hit: ScoredNode) -> tuple[int, str, int, float]:
    """Leaves in document order first, then summaries best first."""
    n = hit.node
    if n.layer == 0:
        return (0, n.source or "", n.char_start or 0, 0.0)
    return (1, "", 0, -hit.score)
