"""Summaries from any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp, LM Studio).

Prompts are those of the adRAP paper: Table 4 for cluster summaries, Table 5 for query-focused
summaries (postQFRAP). The adapter does its own retries (construct the client with
``max_retries=0``): exponential backoff with jitter on 429, 5xx, timeouts and connection errors,
``Retry-After`` honoured, and an immediate, explained error on 400/401/403/404. A summary that
still fails is a :class:`~ingestor.errors.SummarizationError`, never text.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor
from datetime import UTC, datetime

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from ingestor.errors import UNCOUNTED_SHARE, ContextWindowError, SummarizationError
from ingestor.waiting import wait_interruptibly

__all__ = [
    "PROMPT_VERSION",
    "QUERY_SUMMARY_PROMPT",
    "SUMMARY_PROMPT",
    "SYSTEM_PROMPT",
    "OpenAISummarizer",
]

log = logging.getLogger(__name__)

#: Bump whenever a prompt below changes: it is part of the summary-cache key.
PROMPT_VERSION = "adrap-t4-t5-1"
#: [A] Tables 4 and 5, system role.
SYSTEM_PROMPT = "You are a helpful assistant."
#: [A] Table 4: summary of a cluster.
SUMMARY_PROMPT = (
    "Write a summary of the following, including as many key details as possible using at most "
    "{max_tokens} tokens: {context}"
)
#: [A] Table 5: query-focused summary (postQFRAP).
QUERY_SUMMARY_PROMPT = (
    "Summarize the information in the retrieved documents using at most {max_tokens} tokens. "
    "Make sure to include in your summary all the details that can be used to answer the "
    "question and omit any details that are entirely irrelevant to the question. "
    "Retrieved documents: {context} Question: {question} Summary:"
)

_RETRYABLE = (
    openai.RateLimitError,
    openai.InternalServerError,
    openai.APITimeoutError,
    openai.APIConnectionError,
)
_FIXES = {
    400: "the request was rejected; the cluster may exceed the model's context window "
    "(lower ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS) or the server rejects a parameter",
    401: "the API key was refused; check ADRAP_SUMMARY__OPENAI__API_KEY",
    403: "the API key may not use this model; check ADRAP_SUMMARY__OPENAI__API_KEY and the "
    "model's access rights",
    404: "the model or endpoint does not exist; check ADRAP_SUMMARY__OPENAI__MODEL and "
    "ADRAP_SUMMARY__OPENAI__BASE_URL (it usually ends in /v1)",
}


#: How servers say a request is longer than the model's context: llama.cpp ("request (2077
#: tokens) exceeds the available context size (2048 tokens)"), OpenAI and vLLM ("This model's
#: maximum context length is 8192 tokens. However, you requested 9000 tokens").
_WINDOW = (
    re.compile(
        r"request \((?P<asked>\d+) tokens\) exceeds the available context size \((?P<size>\d+)"
    ),
    re.compile(
        r"maximum context length is (?P<size>\d+) tokens.*?(?:requested|resulted in) (?P<asked>\d+)",
        re.S,
    ),
    re.compile(r"maximum context length is (?P<size>\d+) tokens"),
    re.compile(r"context (?:size|window|length) (?:of |is )?\(?(?P<size>\d+)"),
)


def context_window(message: str) -> tuple[int, int | None] | None:
    """Return ``(window, requested)`` tokens if ``message`` is a server's "longer than the
    context" refusal that names the window (``requested`` None where it gives no count)."""
    for pattern in _WINDOW:
        m = pattern.search(message)
        if m is not None:
            asked = m.groupdict().get("asked")
            return int(m["size"]), None if asked is None else int(asked)
    return None


class _Cancelled(Exception):
    """Another group of the same batch failed; stop before the next attempt."""


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(exc: openai.APIError) -> float | None:
    """Return the server's requested wait in seconds, if it sent one."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class OpenAISummarizer:
    """Summarises clusters with an OpenAI-compatible chat-completions endpoint.

    Attributes:
        id: ``"openai:<model>"``, written into every summary's payload.
        prompt_version: :data:`PROMPT_VERSION`; part of the summary-cache key.
        calls: chat completions that returned a summary (failed attempts are not counted).
        prompt_tokens: prompt tokens reported by the server (``usage``), summed.
        completion_tokens: completion tokens reported by the server, summed.
    """

    prompt_version = PROMPT_VERSION

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        concurrency: int = 4,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        temperature: float = 0.0,
        timeout: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Create the adapter around a client built by the caller.

        Args:
            client: an ``openai.OpenAI`` client (base_url, key, http client); the adapter uses a
                copy with the SDK's retries switched off, so only its own loop retries.
            model: model name the server accepts.
            concurrency: groups summarised at the same time by ``summarize_many``.
            max_retries: retries after the first attempt on 429, 5xx, timeouts and connection
                errors; a group is attempted at most ``max_retries + 1`` times.
            backoff_base: first backoff, seconds; doubled on each retry, then jittered.
            backoff_max: cap on any wait, including a server's ``Retry-After``.
            temperature: sampling temperature (0 for reproducible summaries).
            timeout: seconds per request.
            sleep: waits between attempts (tests inject a recorder).

        Raises:
            ValueError: a numeric argument is out of range.
        """
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be at least 0, got {max_retries!r}")
        if backoff_base < 0 or backoff_max < 0:
            raise ValueError(
                f"backoff_base and backoff_max must be >= 0, got {backoff_base!r}, {backoff_max!r}"
            )
        self.id = f"openai:{model}"
        self.model = model
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.temperature = temperature
        self.timeout = timeout
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        # Only this adapter retries: the SDK's own retries would multiply the attempts.
        self._client = client.with_options(max_retries=0)
        self._sleep = sleep
        self._lock = threading.Lock()
        self._random = random.Random()

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        """Return one summary per group, in order, ``concurrency`` requests at a time.

        Args:
            groups: each group holds the texts of one cluster; they are joined with blank lines.
            max_tokens: the length asked for in the prompt, also sent as the completion limit
                (``max_tokens``; in the model's tokens, so cl100k counts may differ slightly).
            query: switches to the query-focused prompt ([A] Table 5).

        Returns:
            The stripped summaries, one per group.

        Raises:
            SummarizationError: ``max_tokens`` < 1, a group is empty, or any group failed after
                its retries. Pending groups are cancelled and no partial result is returned.
        """
        if max_tokens < 1:
            raise SummarizationError(f"max_tokens must be at least 1, got {max_tokens!r}")
        for index, texts in enumerate(groups):
            if not any(text.strip() for text in texts):
                raise SummarizationError(
                    f"group {index} has no text to summarise ({len(texts)} texts, all empty or "
                    "whitespace); drop empty clusters before summarising"
                )
        if not groups:
            return []
        cancelled = threading.Event()
        workers = min(self.concurrency, len(groups))
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="adrap-summary")
        try:
            futures = [
                executor.submit(self._summarize_one, texts, max_tokens, query, cancelled)
                for texts in groups
            ]
            wait_interruptibly(futures, FIRST_EXCEPTION)  # Ctrl-C: see ingestor.waiting
            for index, future in enumerate(futures):
                if future.done() and future.exception() is not None:
                    cancelled.set()
                    exc = future.exception()
                    if isinstance(exc, SummarizationError):
                        raise SummarizationError(f"group {index} of {len(groups)}: {exc}") from exc
                    raise SummarizationError(
                        f"group {index} of {len(groups)} failed unexpectedly with "
                        f"{type(exc).__name__}: {_short(str(exc))}"
                    ) from exc
            return [future.result() for future in futures]
        finally:
            cancelled.set()
            executor.shutdown(wait=True, cancel_futures=True)

    def _messages(
        self, texts: Sequence[str], max_tokens: int, query: str | None
    ) -> list[ChatCompletionMessageParam]:
        context = "\n\n".join(texts)
        if query is None:
            user = SUMMARY_PROMPT.format(max_tokens=max_tokens, context=context)
        else:
            user = QUERY_SUMMARY_PROMPT.format(
                max_tokens=max_tokens, context=context, question=query
            )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def _where(self) -> str:
        return f"model {self.model!r} at {self._client.base_url}"

    def check_reachable(self, timeout: float = 10.0) -> None:
        """Fail fast where no summary could be written: ask the endpoint for its models (one
        cheap request) before a build reads and embeds anything. A server that does not list
        models, or lists others (a gateway may route any name), is let through.

        Raises:
            SummarizationError: the endpoint cannot be reached, or refuses the API key.
        """
        try:
            self._client.with_options(timeout=timeout).models.list()
        except (openai.APIConnectionError, openai.AuthenticationError) as exc:
            fix = (
                "set ADRAP_SUMMARY__OPENAI__API_KEY to a key it accepts"
                if isinstance(exc, openai.AuthenticationError)
                else "start the server, or fix ADRAP_SUMMARY__OPENAI__BASE_URL"
            )
            raise SummarizationError(
                f"the LLM that writes summaries ({self._where()}) cannot be used: "
                f"{self._describe(exc)}; {fix}"
            ) from exc
        except openai.OpenAIError as exc:  # no /models here (404), an odd reply: let it be
            log.debug("%s: its models could not be listed (%s)", self._where(), exc)

    def _backoff(self, attempt: int, exc: openai.APIError) -> float:
        requested = _retry_after(exc)
        if requested is not None:
            return min(requested, self.backoff_max)
        ceiling = min(self.backoff_max, self.backoff_base * 2.0**attempt)
        return ceiling * (0.5 + 0.5 * self._random.random())  # jitter spreads out retry storms

    def complete(self, messages: Sequence[ChatCompletionMessageParam], *, max_tokens: int) -> str:
        """Return the model's reply to ``messages`` (e.g. an answer), with the same retry rules.

        Counted in ``calls`` and the token totals like a summary.

        Raises:
            SummarizationError: the request failed after its retries or was refused.
        """
        return self._complete(list(messages), max_tokens, threading.Event(), what="answer")

    def _summarize_one(
        self, texts: Sequence[str], max_tokens: int, query: str | None, cancelled: threading.Event
    ) -> str:
        return self._complete(self._messages(texts, max_tokens, query), max_tokens, cancelled)

    def _complete(
        self,
        messages: list[ChatCompletionMessageParam],
        max_tokens: int,
        cancelled: threading.Event,
        what: str = "summary",
    ) -> str:
        for attempt in range(self.max_retries + 1):
            if cancelled.is_set():
                raise _Cancelled
            try:
                response = self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,
                    max_tokens=max_tokens,
                    temperature=self.temperature,
                    timeout=self.timeout,
                )
            except _RETRYABLE as exc:
                if attempt == self.max_retries:
                    raise SummarizationError(
                        f"{what} by {self._where()} failed after {attempt + 1} attempts "
                        f"({self._describe(exc)}); check that the server is up and not "
                        "overloaded, or raise ADRAP_SUMMARY__OPENAI__MAX_RETRIES"
                    ) from exc
                delay = self._backoff(attempt, exc)
                log.warning(
                    "%s by %s: %s; retry %d/%d in %.2f s",
                    what,
                    self._where(),
                    self._describe(exc),
                    attempt + 1,
                    self.max_retries,
                    delay,
                )
                self._sleep(delay)
                continue
            except openai.APIStatusError as exc:
                window = context_window(str(exc)) if exc.status_code == 400 else None
                if window is not None:
                    size, asked = window
                    raise ContextWindowError(
                        f"{what} by {self._where()} was refused: the request"
                        f"{f' ({asked} tokens as the server counts them)' if asked else ''} is "
                        f"longer than the model's context window of {size} tokens; set "
                        f"ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS to at most "
                        f"{int(size * UNCOUNTED_SHARE)}, "
                        "or give the model a larger context (llama.cpp: --ctx-size, per slot)",
                        size,
                        asked,
                    ) from exc
                fix = _FIXES.get(exc.status_code, "see the server's message")
                raise SummarizationError(
                    f"{what} by {self._where()} was refused ({self._describe(exc)}); {fix}"
                ) from exc
            except openai.OpenAIError as exc:
                raise SummarizationError(
                    f"{what} by {self._where()} failed ({self._describe(exc)})"
                ) from exc
            return self._text_of(response, max_tokens, what)
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    @staticmethod
    def _describe(exc: openai.OpenAIError) -> str:
        status = getattr(exc, "status_code", None)
        head = f"HTTP {status}" if status is not None else type(exc).__name__
        return f"{head}: {_short(str(exc))}"

    def _text_of(self, response: ChatCompletion, max_tokens: int, what: str = "summary") -> str:
        if not response.choices:
            raise SummarizationError(
                f"{self._where()} returned no choices; check that the endpoint serves chat "
                "completions"
            )
        choice = response.choices[0]
        if choice.finish_reason == "content_filter":
            raise SummarizationError(
                f"{self._where()} withheld the {what} (finish_reason='content_filter'); the "
                "input text tripped the provider's content filter"
            )
        text = (choice.message.content or "").strip()
        if not text:
            raise SummarizationError(
                f"{self._where()} returned an empty {what} (finish_reason="
                f"{choice.finish_reason!r}); try another model or a larger max_tokens"
            )
        if choice.finish_reason == "length":
            log.debug("%s by %s hit max_tokens=%d", what, self._where(), max_tokens)
        with self._lock:
            self.calls += 1
            if response.usage is not None:
                self.prompt_tokens += response.usage.prompt_tokens
                self.completion_tokens += response.usage.completion_tokens
        return text
