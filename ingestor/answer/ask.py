"""Answers with numbered citations: the QA prompt, the numbered context, the citations used.

The prompt is the QA prompt of the adRAP paper ([A] Table 7, RAPTOR's QA style: answer ONLY from
the given context, say so when it has no answer), with numbered sources and one added sentence
asking the model to cite them as ``[n]``. Every ``[n]`` maps to a context part, and so to files
and character spans.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingestor.answer.provenance import ContextPart

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

__all__ = [
    "ANSWER_PROMPT_VERSION",
    "QA_SYSTEM_PROMPT",
    "QA_USER_PROMPT",
    "Citation",
    "citations_in",
    "numbered_context",
    "qa_messages",
]

ANSWER_PROMPT_VERSION = "adrap-t7-cite-1"
#: [A] Table 7 (system role), plus the sentence on citations.
QA_SYSTEM_PROMPT = (
    "You are a Question Answering Portal. Given a question with relevant information sources, "
    "your task is to respond to the question using ONLY information from the provided sources. "
    "Ensure that the facts included are directly related to answering the question. If the "
    'sources do not provide an answer, reply with "No information provided in the sources." '
    "Cite the sources you use by their numbers in square brackets, like [1] or [2][3]. "
    "Sources: {context}"
)
#: [A] Table 7 (user role).
QA_USER_PROMPT = (
    "Question: {question}\nGenerate an answer with at most {max_tokens} tokens.\nAnswer:"
)

_CITATION = re.compile(r"\[(\d{1,4})\]")


@dataclass(frozen=True, slots=True)
class Citation:
    """One numbered source of an answer: ``[number]`` is ``part``."""

    number: int
    part: ContextPart

    def to_json(self) -> dict[str, Any]:
        return {"n": self.number, **self.part.to_json()}


def numbered_context(parts: Sequence[ContextPart]) -> str:
    """Return ``[1] text`` paragraphs, one per part, numbered from 1."""
    return "\n\n".join(f"[{i}] {p.text}" for i, p in enumerate(parts, 1))


def qa_messages(
    question: str, parts: Sequence[ContextPart], max_tokens: int
) -> list[ChatCompletionMessageParam]:
    """Return the chat messages asking for an answer from the numbered parts."""
    system = QA_SYSTEM_PROMPT.format(context=numbered_context(parts))
    user = QA_USER_PROMPT.format(question=question, max_tokens=max_tokens)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def citations_in(answer: str, parts: Sequence[ContextPart]) -> tuple[list[Citation], list[int]]:
    """Return the citations ``[n]`` of ``answer`` that name a part, in order of first use, and
    the numbers it cites that name no part (a model's invention; reported, never resolved)."""
    used: list[Citation] = []
    unknown: list[int] = []
    for match in _CITATION.finditer(answer):
        n = int(match.group(1))
        if 1 <= n <= len(parts):
            if all(c.number != n for c in used):
                used.append(Citation(n, parts[n - 1]))
        elif n not in unknown:
            unknown.append(n)
    return used, unknown


def fit_prompt(
    question: str, parts: list[ContextPart], answer_tokens: int, limit: int | None
) -> int:
    """Drop the last (least relevant) of ``parts`` until the answer's prompt and its
    ``answer_tokens`` fit the model's input ``limit`` (None: no limit); return how many were
    dropped."""
    if limit is None:
        return 0
    dropped = 0
    while parts and prompt_size(question, parts, answer_tokens) > limit:
        parts.pop()
        dropped += 1
    return dropped


def prompt_size(question: str, parts: list[ContextPart], answer_tokens: int) -> int:
    """The answer's prompt over ``parts`` and its ``answer_tokens``, in adrap's tokens."""
    from ingestor.read.tokens import default_tokenizer

    tokenizer = default_tokenizer()
    messages = qa_messages(question, parts, answer_tokens)
    return sum(tokenizer.count(str(m["content"])) for m in messages) + answer_tokens
