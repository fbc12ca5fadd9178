"""Pluggable parts of the ingestor. (The embedder and node store protocols live in retriever.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


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
