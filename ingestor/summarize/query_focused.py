"""Query-focused extractive summaries: postQFRAP with no model server [A §5, offline].

Sentences are scored by *relevance* to the question (TF-IDF cosine) and *centrality* in their group
(cosine to the group's TF-IDF centroid), then picked by maximal marginal relevance (MMR): each pick
maximises ``lambda * score - (1 - lambda) * max similarity to the sentences already picked``, so a
second copy of the same fact loses to a new one. Picks stop when nothing more fits the token
budget; the picked sentences are emitted in the sources' order. TF-IDF is fitted once per call on
the sentences of every group (the whole retrieved set of one question), so rare question words
weigh across groups the same way. Deterministic: no sampling, ties broken by position.

Every output sentence is an exact slice of an input text (``Sentence.start/end``), which is how
postQFRAP keeps provenance down to a file's character span. Only a sentence longer than the whole
budget is cut (to a prefix, never past a character boundary).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from ingestor.errors import SummarizationError
from ingestor.read.sentences import split_sentences
from ingestor.read.tokens import Tokenizer, default_tokenizer
from ingestor.summarize.extractive import truncate

log = logging.getLogger(__name__)

__all__ = ["QueryFocusedExtractiveSummarizer", "Sentence", "split_units"]

_WHITESPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w")


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence of an input text: ``texts[origin][start:end] == text``.

    Attributes:
        text: the sentence, exactly as in its text (inner whitespace kept).
        origin: index of the text it comes from (the caller's numbering; also the output order).
        start: offset of its first character in that text.
        end: offset one past its last character.
    """

    text: str
    origin: int
    start: int
    end: int

    @property
    def key(self) -> str:
        """The sentence with whitespace collapsed: equal keys are the same sentence."""
        return _WHITESPACE.sub(" ", self.text).strip()


def split_units(texts: Sequence[str], origins: Sequence[int] | None = None) -> list[Sentence]:
    """Split texts into :class:`Sentence` units with the chunker's sentence splitter.

    Args:
        texts: the texts.
        origins: the origin number of each text (default: its index).
    """
    out: list[Sentence] = []
    for i, text in enumerate(texts):
        origin = i if origins is None else origins[i]
        for start, end in split_sentences(text):
            sentence = text[start:end]
            if sentence.strip():
                out.append(Sentence(sentence, origin, start, end))
    return out


class QueryFocusedExtractiveSummarizer:
    """Offline query-focused summaries: relevance + centrality, MMR, sources' order, token-bounded.

    Args:
        tokenizer: counts ``max_tokens`` (default cl100k_base, offline).
        query_weight: weight of relevance against centrality in a sentence's score.
        diversity: ``1 - lambda`` of MMR: how much similarity to a picked sentence costs.

    Attributes:
        id: ``"extractive-qf"``.
        prompt_version: version of the algorithm.
        calls: groups summarised so far; prompt_tokens, completion_tokens: always 0.
    """

    id = "extractive-qf"
    prompt_version = "qf-mmr-1"

    def __init__(
        self,
        tokenizer: Tokenizer | None = None,
        *,
        query_weight: float = 0.7,
        diversity: float = 0.3,
    ) -> None:
        for name, value in (("query_weight", query_weight), ("diversity", diversity)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value!r}")
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else default_tokenizer()
        self.query_weight = query_weight
        self.diversity = diversity
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        """Return one summary per group (the Summarizer protocol): the picked sentences joined.

        Raises:
            SummarizationError: ``max_tokens`` < 1 or a group has no sentence.
        """
        units = [split_units(texts) for texts in groups]
        return [self.join(s) for s in self.select(units, query=query, max_tokens=max_tokens)]

    @staticmethod
    def join(sentences: Sequence[Sentence]) -> str:
        """Join picked sentences into a summary: stripped, separated by one space."""
        return " ".join(s.text.strip() for s in sentences)

    def select(
        self, groups: Sequence[Sequence[Sentence]], *, query: str | None, max_tokens: int
    ) -> list[list[Sentence]]:
        """Pick each group's sentences; ``join`` of a result has at most ``max_tokens`` tokens.

        Args:
            groups: the sentences of each group, in the sources' order.
            query: the question (None: centrality and MMR only).
            max_tokens: budget of each joined summary, in tokens of ``self.tokenizer``.

        Returns:
            Per group, the picked sentences ordered by ``(origin, start)``; never empty.

        Raises:
            SummarizationError: ``max_tokens`` < 1, or a group has no sentence (nothing is
                summarised then: every group is checked first).
        """
        if max_tokens < 1:
            raise SummarizationError(f"max_tokens must be at least 1, got {max_tokens!r}")
        deduped = [self._dedupe(g) for g in groups]
        for index, group in enumerate(deduped):
            if not group:
                raise SummarizationError(
                    f"group {index} has no sentence to summarise; drop empty groups first"
                )
        if not deduped:
            return []
        rows = self._vectorise([s for g in deduped for s in g], query)
        out: list[list[Sentence]] = []
        offset = 0
        for group in deduped:
            vectors = rows[0][offset : offset + len(group)]
            relevance = rows[1][offset : offset + len(group)]
            offset += len(group)
            out.append(self._pick(group, vectors, relevance, max_tokens))
        self.calls += len(groups)
        return out

    @staticmethod
    def _dedupe(group: Sequence[Sentence]) -> list[Sentence]:
        """Keep the first of sentences with equal text (overlapping chunks repeat sentences)."""
        seen: set[str] = set()
        out = []
        for s in group:
            key = s.key
            if key and key not in seen:
                seen.add(key)
                out.append(s)
        return out

    @staticmethod
    def _vectorise(
        sentences: list[Sentence], query: str | None
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return dense L2-normalised TF-IDF rows and each sentence's cosine to the query."""
        n = len(sentences)
        if not any(_WORD.search(s.text) for s in sentences):
            return np.zeros((n, 1)), np.zeros(n)
        from sklearn.feature_extraction.text import TfidfVectorizer  # ~1 s: when used

        vectorizer = TfidfVectorizer(sublinear_tf=True, token_pattern=r"(?u)\b\w+\b")
        rows = np.asarray(vectorizer.fit_transform([s.key for s in sentences]).todense())
        if not query:
            return rows, np.zeros(n)
        q = np.asarray(vectorizer.transform([query]).todense()).ravel()
        return rows, rows @ q

    def _pick(
        self,
        group: list[Sentence],
        vectors: NDArray[np.float64],
        relevance: NDArray[np.float64],
        max_tokens: int,
    ) -> list[Sentence]:
        centroid = vectors.mean(axis=0)
        norm = float(np.linalg.norm(centroid))
        centrality = vectors @ centroid / norm if norm > 0 else np.zeros(len(group))
        w = self.query_weight if relevance.any() else 0.0
        score = w * relevance + (1.0 - w) * centrality
        similarity = vectors @ vectors.T
        cost = [len(self.tokenizer.encode(" " + s.text.strip())) for s in group]
        lam = 1.0 - self.diversity
        chosen: list[int] = []
        redundancy = np.zeros(len(group))
        free = np.ones(len(group), dtype=bool)
        used = 0
        while free.any():
            mmr = np.where(free, lam * score - (1.0 - lam) * redundancy, -np.inf)
            i = int(np.argmax(mmr))  # ties: the earliest sentence
            free[i] = False
            if used + cost[i] > max_tokens:
                continue
            chosen.append(i)
            used += cost[i]
            redundancy = np.maximum(redundancy, similarity[i])
        while chosen:
            picked = [group[i] for i in sorted(chosen, key=lambda i: self._order(group[i]))]
            if len(self.tokenizer.encode(self.join(picked))) <= max_tokens:
                return picked
            chosen.pop()  # the last (lowest-MMR) pick goes until the exact count fits
        return [self._cut(group[int(np.argmax(score))], max_tokens)]

    @staticmethod
    def _order(s: Sentence) -> tuple[int, int]:
        return (s.origin, s.start)

    def _cut(self, sentence: Sentence, max_tokens: int) -> Sentence:
        """Cut one sentence longer than the budget to a prefix that fits."""
        lead = len(sentence.text) - len(sentence.text.lstrip())
        prefix = truncate(sentence.text.strip(), max_tokens, self.tokenizer)
        if not prefix:
            raise SummarizationError(
                f"max_tokens={max_tokens} cannot hold the first character of "
                f"{sentence.text[:80]!r}; raise max_tokens"
            )
        start = sentence.start + lead
        return replace(sentence, text=prefix, start=start, end=start + len(prefix))
