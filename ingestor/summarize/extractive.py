"""Cluster summarisers: the offline extractive default (here) and any OpenAI-compatible LLM.

``ExtractiveSummarizer`` picks the most central sentences of a cluster by *lexical centrality*
(cosine of each sentence's TF-IDF vector to the cluster's TF-IDF centroid) and emits them in their
original order, up to a cl100k_base token budget. It calls no model, so summarising a tree layer
costs a few milliseconds per cluster, far below the cost of embedding the leaves.

``OpenAISummarizer`` lives in :mod:`ingestor.summarize.openai_compat` (it imports ``openai``, ~1 s).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import cast

import numpy as np
from numpy.typing import NDArray

from ingestor.errors import SummarizationError
from ingestor.protocols import Mapper
from ingestor.read.sentences import BULLET, split_units
from ingestor.read.tokens import Tokenizer, default_tokenizer

log = logging.getLogger(__name__)

_WHITESPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w")


def _sentences(text: str, *, structure: bool = False) -> list[str]:
    """Split ``text`` into sentences with their whitespace collapsed to single spaces.

    The chunker's splitter is used so that the sentences two overlapping chunks share come out
    identical here and are dropped as duplicates. Headings and table rows are structure, not
    sentences: they are left out (``structure``: only they are taken, as plain text, for a
    cluster that holds nothing else, such as a spreadsheet's), and a list item's marker is
    dropped from its sentence.
    """
    out = []
    for start, end, kind in split_units(text):
        if (kind != "text") != structure:
            continue
        piece = text[start:end]
        if kind == "row":
            piece = "; ".join(c.strip() for c in piece.strip("|").split("|") if c.strip())
        elif kind == "heading":
            piece = piece.lstrip("#")
        sentence = _WHITESPACE.sub(" ", BULLET.sub("", piece, count=1)).strip()
        if sentence:
            out.append(sentence)
    return out


def truncate(text: str, max_tokens: int, tokenizer: Tokenizer) -> str:
    """Cut ``text`` to at most ``max_tokens`` tokens without splitting a multi-byte character."""
    tokens = tokenizer.encode(text)
    n = min(len(tokens), max_tokens)
    while n > 0:
        raw = tokenizer.decode_bytes(tokens[:n])
        try:
            cut = raw.decode("utf-8")
        except UnicodeDecodeError as exc:  # a token boundary fell inside a character
            cut = raw[: exc.start].decode("utf-8")
        cut = cut.rstrip()
        # Re-encoding a prefix can merge differently; only return what provably fits.
        if len(tokenizer.encode(cut)) <= max_tokens:
            return cut
        n -= 1
    return ""


#: Groups summarised per task when a build runs the work on its worker processes.
GROUPS_PER_TASK = 8


def _summarize_part(
    task: tuple[ExtractiveSummarizer, list[list[str]], int, str | None],
) -> list[str | None]:
    """Summarise groups of texts (a worker process's task): None for a group without text."""
    summarizer, groups, max_tokens, query = task
    out: list[str | None] = []
    for texts in groups:
        sentences = summarizer._unique_sentences(texts)
        out.append(summarizer._summarize(sentences, max_tokens, query) if sentences else None)
    return out


class ExtractiveSummarizer:
    """Offline, deterministic extractive summaries by lexical centrality.

    For each group: split the texts into sentences, drop repeated sentences (neighbouring chunks
    overlap, so a sentence often appears in two children), score each remaining sentence, take
    sentences greedily by score (ties: earlier first) while the summary fits in ``max_tokens``
    cl100k_base tokens, and join them with spaces in their original order (text order within a
    child, children in the order given).

    Scores:
        * centrality = cosine(TF-IDF of the sentence, mean TF-IDF of the cluster's sentences);
          TF-IDF is fitted on the cluster's own sentences, with sublinear tf and no stop words.
        * with ``query``: ``query_weight * cosine(sentence, query) + (1 - query_weight) *
          centrality``. The default 0.7 lets sentences that share rare words with the question
          win (postQFRAP wants every detail that answers it) while centrality orders the
          sentences the query does not distinguish and fills the rest of the budget with the
          cluster's core. A query sharing no word with the cluster leaves the centrality order.
        * texts without any word character score 0 everywhere, so the first sentences are kept.

    Attributes:
        id: ``"extractive"``, written into every summary's payload.
        prompt_version: version of the algorithm; part of the summary-cache key.
        calls: groups summarised so far (one "call" per group, like the LLM backend).
        prompt_tokens: always 0 (no model is called).
        completion_tokens: always 0.
    """

    id = "extractive"
    prompt_version = "lexical-centrality-1"

    def __init__(self, tokenizer: Tokenizer | None = None, *, query_weight: float = 0.7) -> None:
        """Create the summariser.

        Args:
            tokenizer: counts the ``max_tokens`` budget; default cl100k_base (offline).
            query_weight: weight of query similarity against centrality when ``query`` is given.

        Raises:
            ValueError: ``query_weight`` is outside [0, 1].
        """
        if not 0.0 <= query_weight <= 1.0:
            raise ValueError(f"query_weight must be within [0, 1], got {query_weight!r}")
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else default_tokenizer()
        self.query_weight = query_weight
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def summarize_many(
        self,
        groups: Sequence[Sequence[str]],
        *,
        max_tokens: int,
        query: str | None = None,
        mapper: Mapper | None = None,
    ) -> list[str]:
        """Return one extractive summary per group, in order.

        Args:
            groups: each group holds the texts of one cluster, children in order.
            max_tokens: hard cap on each summary, in tokens of ``self.tokenizer``.
            query: switches to query-focused scoring (postQFRAP).
            mapper: runs the work, :data:`GROUPS_PER_TASK` groups a task (a build's worker
                processes); None: here. The summaries are the same.

        Returns:
            One non-empty summary of at most ``max_tokens`` tokens per group.

        Raises:
            SummarizationError: ``max_tokens`` < 1, or a group is empty or holds only whitespace.
                No partial result is returned.
        """
        if max_tokens < 1:
            raise SummarizationError(f"max_tokens must be at least 1, got {max_tokens!r}")
        if mapper is None:
            results = _summarize_part((self, [list(g) for g in groups], max_tokens, query))
        else:
            tasks = [
                (self, [list(g) for g in groups[i : i + GROUPS_PER_TASK]], max_tokens, query)
                for i in range(0, len(groups), GROUPS_PER_TASK)
            ]
            results = [s for part in mapper(_summarize_part, tasks) for s in part]
        for index, summary in enumerate(results):
            if summary is None:
                raise SummarizationError(
                    f"group {index} has no text to summarise ({len(groups[index])} texts, all "
                    "empty or whitespace); drop empty clusters before summarising"
                )
        summaries = cast(list[str], results)
        self.calls += len(groups)
        log.debug("extractive: %d summaries, max_tokens=%d", len(summaries), max_tokens)
        return summaries

    @staticmethod
    def _unique_sentences(texts: Sequence[str]) -> list[str]:
        for structure in (False, True):  # prose first; headings and rows only if there is none
            seen: set[str] = set()
            out = []
            for text in texts:
                for sentence in _sentences(text, structure=structure):
                    if sentence not in seen:
                        seen.add(sentence)
                        out.append(sentence)
            if out:
                return out
        return []

    def _scores(self, sentences: list[str], query: str | None) -> NDArray[np.float64]:
        if not any(_WORD.search(s) for s in sentences):
            return np.zeros(len(sentences))
        from sklearn.feature_extraction.text import TfidfVectorizer  # ~1 s: when used

        vectorizer = TfidfVectorizer(sublinear_tf=True, token_pattern=r"(?u)\b\w+\b")
        rows = vectorizer.fit_transform(sentences)  # rows are L2-normalised (or all zero)
        centroid: NDArray[np.float64] = np.asarray(rows.mean(axis=0), dtype=np.float64).ravel()
        centrality: NDArray[np.float64] = np.asarray(rows @ centroid, dtype=np.float64).ravel()
        centrality /= np.linalg.norm(centroid)
        if query is None or self.query_weight == 0.0:
            return centrality
        query_row = vectorizer.transform([query])  # words the cluster lacks weigh nothing
        similarity: NDArray[np.float64] = np.asarray(
            (rows @ query_row.T).todense(), dtype=np.float64
        ).ravel()
        return self.query_weight * similarity + (1.0 - self.query_weight) * centrality

    def _summarize(self, sentences: list[str], max_tokens: int, query: str | None) -> str:
        scores = self._scores(sentences, query)
        ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
        chosen: list[int] = []
        used = 0
        for i in ranked:
            # Cost as it will appear after a joining space; the join is re-counted below.
            cost = len(self.tokenizer.encode(" " + sentences[i]))
            if used + cost <= max_tokens:
                chosen.append(i)
                used += cost
                if used >= max_tokens:
                    break
        while chosen:
            summary = " ".join(sentences[i] for i in sorted(chosen))
            if len(self.tokenizer.encode(summary)) <= max_tokens:
                return summary
            chosen.pop()  # drop the lowest-scored pick until the exact count fits
        summary = truncate(sentences[ranked[0]], max_tokens, self.tokenizer)
        if not summary:
            raise SummarizationError(
                f"max_tokens={max_tokens} cannot hold even the first character of the best "
                f"sentence {sentences[ranked[0]][:80]!r}; raise max_tokens"
            )
        return summary
