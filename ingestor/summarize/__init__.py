"""Summarise clusters of node texts: ``ExtractiveSummarizer`` (offline default) or ``OpenAISummarizer``.

``OpenAISummarizer`` is exported lazily: it imports ``openai`` (~1 s), which the extractive path
should not pay for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ingestor.summarize.extractive import ExtractiveSummarizer

if TYPE_CHECKING:
    from ingestor.summarize.openai_compat import OpenAISummarizer

__all__ = ["ExtractiveSummarizer", "OpenAISummarizer"]


def __getattr__(name: str) -> Any:
    if name == "OpenAISummarizer":
        from ingestor.summarize.openai_compat import OpenAISummarizer

        return OpenAISummarizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
