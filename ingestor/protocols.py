"""Pluggable parts of the ingestor. (The embedder and node store protocols live in retriever.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Summarizer(Protocol):
    """Summarises a cluster of texts.

    ``id`` is written into every summary's payload (e.g. ``extractive``, ``openai:gpt-4o-mini``);
    ``prompt_version`` is part of the summary-cache key, so changing a prompt invalidates the cache.
    """

    id: str
    prompt_version: str

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        """Return one summary per group, in order; remote backends run groups concurrently.

        ``query`` switches to query-focused summarisation (postQFRAP, [A] Table 5).

        Raises:
            SummarizationError: any group failed after retries; no partial result is returned.
        """
        ...


#: Runs a module-level function over picklable tasks, results in task order: a build's worker
#: processes (:meth:`ingestor.cluster.parallel.WorkerPool.map`), or the builtin loop.
Mapper = Callable[[Callable[[Any], Any], list[Any]], list[Any]]


class MappedSummarizer(Summarizer, Protocol):
    """A summariser whose work is a pure function of its input (the extractive one): a build
    hands it its worker processes as ``mapper`` (a ``summarize_many`` that takes ``mapper`` is
    one), and the summaries are the same with any number.
    """

    def summarize_many(
        self,
        groups: Sequence[Sequence[str]],
        *,
        max_tokens: int,
        query: str | None = None,
        mapper: Mapper | None = None,
    ) -> list[str]:
        """As :meth:`Summarizer.summarize_many`; ``mapper`` runs the groups' work."""
        ...
