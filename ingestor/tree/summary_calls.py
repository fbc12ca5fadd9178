"""How a tree's summaries are paid for: in batches sized by time, on the build's workers.

A batch is checkpointed and the build may stop between two (a killed build loses one batch at
most), so batches take about :data:`SUMMARY_BATCH_SECONDS`; a batch is at least one round of the
summariser's concurrent requests (an LLM), or, for a summariser that takes the build's worker
processes (:class:`~ingestor.protocols.MappedSummarizer`: the extractive one), a round of
:data:`MAPPED_GROUPS_PER_WORKER` clusters for each worker.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from ingestor.cluster.parallel import worker_pool
from ingestor.protocols import MappedSummarizer, Summarizer

__all__ = [
    "MAPPED_GROUPS_PER_WORKER",
    "SUMMARY_BATCH_MAX",
    "SUMMARY_BATCH_SECONDS",
    "CallCost",
    "batch_floor",
    "mapped",
    "next_batch",
    "summarize_many",
    "tokens_used",
]

#: Summaries are paid for in batches of about this many seconds (checkpointed, stoppable between).
SUMMARY_BATCH_SECONDS = 5.0
SUMMARY_BATCH_MAX = 64
#: Clusters a batch gives each worker when a mapped summariser runs on the build's workers.
MAPPED_GROUPS_PER_WORKER = 32
#: An LLM counts a text in its own tokenizer: SmolLM2's counts SQuAD text at 1.07-1.16x cl100k.
LLM_TOKEN_MARGIN = 1.2
#: The chat template, system prompt and instruction around a call's texts (SmolLM2: ~45 tokens).
LLM_CALL_OVERHEAD = 64


@dataclass(frozen=True)
class CallCost:
    """What one summary call is charged, estimated before it is made, from its children's
    tokens (cl100k, as stored): a summariser that reports its usage (an LLM) is charged prompt
    and completion in its own tokens, so its prompt gets a tokenizer margin and the template
    around it, plus the longest summary it may write; one that reports none (the extractive one)
    is charged the children's tokens alone."""

    completion: int
    margin: float = 1.0
    overhead: int = 0

    @classmethod
    def of(cls, summarizer: Summarizer, summary_max_tokens: int) -> CallCost:
        if hasattr(summarizer, "prompt_tokens") or hasattr(summarizer, "completion_tokens"):
            return cls(summary_max_tokens, LLM_TOKEN_MARGIN, LLM_CALL_OVERHEAD)
        return cls(0)

    def __call__(self, children_tokens: int) -> int:
        """The tokens one call over children of ``children_tokens`` tokens is charged, at most."""
        if not self.completion:
            return children_tokens
        return math.ceil(children_tokens * self.margin) + self.overhead + self.completion


def mapped(summarizer: Summarizer, workers: int) -> bool:
    """Whether ``summarizer`` runs on the build's ``workers`` processes (its ``summarize_many``
    takes a ``mapper``, and there are two workers or more)."""
    return workers > 1 and "mapper" in inspect.signature(summarizer.summarize_many).parameters


def batch_floor(summarizer: Summarizer, workers: int) -> int:
    """The least a batch holds, and its first size: the summariser's concurrency, or a round of
    the workers."""
    if mapped(summarizer, workers):
        return workers * MAPPED_GROUPS_PER_WORKER
    return max(1, int(getattr(summarizer, "concurrency", 1)))


def next_batch(done: int, seconds: float, floor: int) -> int:
    """Size the next summary batch to take about SUMMARY_BATCH_SECONDS, in whole rounds of
    ``floor`` (see :func:`batch_floor`), between ``floor`` and SUMMARY_BATCH_MAX (or ``floor``
    when it is larger)."""
    want = SUMMARY_BATCH_MAX if seconds <= 0 else int(SUMMARY_BATCH_SECONDS * done / seconds)
    return max(floor, min(SUMMARY_BATCH_MAX, want) // floor * floor)


def tokens_used(summarizer: Summarizer) -> int:
    """Return the tokens a summariser has spent so far (prompt + completion; 0 if it does not say)."""
    return int(getattr(summarizer, "prompt_tokens", 0)) + int(
        getattr(summarizer, "completion_tokens", 0)
    )


def summarize_many(
    summarizer: Summarizer, texts: list[list[str]], max_tokens: int, workers: int
) -> list[str]:
    """``summarizer.summarize_many``; a mapped one gets the build's ``workers`` processes (the
    pool a build keeps: see :mod:`ingestor.cluster.parallel`)."""
    if not mapped(summarizer, workers):
        return summarizer.summarize_many(texts, max_tokens=max_tokens)

    def mapper(fn: Callable[[Any], Any], tasks: list[Any]) -> list[Any]:
        with worker_pool(workers) as pool:
            return pool.map(
                fn,
                tasks,
                count=len(tasks),
                rows=sum(len(group) for group in texts),
                what=lambda i: f"summaries, part {i + 1} of {len(tasks)}",
            )

    return cast(MappedSummarizer, summarizer).summarize_many(
        texts, max_tokens=max_tokens, mapper=mapper
    )
