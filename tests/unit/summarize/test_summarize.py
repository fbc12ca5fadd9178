"""Summarisers: the extractive default and the OpenAI-compatible adapter (mocked HTTP)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestor.errors import ContextWindowError, SummarizationError
from ingestor.protocols import Summarizer
from ingestor.read.chunking import chunk_text
from ingestor.read.tokens import count_tokens, default_tokenizer
from ingestor.summarize.extractive import ExtractiveSummarizer
from ingestor.summarize.openai_compat import (
    PROMPT_VERSION,
    QUERY_SUMMARY_PROMPT,
    SUMMARY_PROMPT,
    SYSTEM_PROMPT,
    OpenAISummarizer,
    context_window,
)
from testkit.fakes import ByteTokenizer

CATS = [
    "Cats sleep most of the day. A cat purrs when it is content. Cats groom their fur often.",
    "A cat purrs when it is content. Kittens play with string. The stock market fell sharply "
    "on Monday.",
    "Cats groom their fur often. Old cats sleep even more than kittens.",
]


@pytest.fixture(scope="module")
def extractive() -> ExtractiveSummarizer:
    return ExtractiveSummarizer()


# --- extractive ---------------------------------------------------------------------------


def test_extractive_satisfies_the_summarizer_protocol() -> None:
    summarizer: Summarizer = ExtractiveSummarizer()
    assert summarizer.id == "extractive"
    assert summarizer.prompt_version


def test_openai_summarizer_is_reexported_lazily_from_summarize() -> None:
    from ingestor import summarize

    assert summarize.OpenAISummarizer is OpenAISummarizer


def test_extractive_is_deterministic(extractive: ExtractiveSummarizer) -> None:
    first = extractive.summarize_many([CATS, CATS[::-1]], max_tokens=30)
    again = ExtractiveSummarizer().summarize_many([CATS, CATS[::-1]], max_tokens=30)
    assert first == again
    assert extractive.summarize_many([CATS, CATS[::-1]], max_tokens=30) == first


def test_extractive_emits_chosen_sentences_in_original_order(
    extractive: ExtractiveSummarizer,
) -> None:
    texts = [f"Point {i} concerns cats and their naps number {i}." for i in range(12)]
    (summary,) = extractive.summarize_many([texts], max_tokens=40)
    picked = [int(s.split()[1]) for s in summary.split(". ") if s]
    assert len(picked) >= 2
    assert picked == sorted(picked)
    assert count_tokens(summary) <= 40


def test_sentence_repeated_by_chunk_overlap_appears_once(extractive: ExtractiveSummarizer) -> None:
    (summary,) = extractive.summarize_many([CATS], max_tokens=500)
    assert summary.count("A cat purrs when it is content.") == 1
    assert summary.count("Cats groom their fur often.") == 1
    # with room for everything, the summary is every distinct sentence in text order
    assert summary.startswith("Cats sleep most of the day. A cat purrs when it is content.")
    assert summary.endswith("Old cats sleep even more than kittens.")


def test_overlap_of_real_chunks_is_dropped(extractive: ExtractiveSummarizer) -> None:
    """Chunks from the chunker share whole sentences; the summary keeps each sentence once."""
    document = " ".join(
        f"Fact {i}: the {w} river carries {i * 7} barges each week."
        for i, w in enumerate("abcdefghijklmnopqrst")
    )
    chunks = [c.text for c in chunk_text(document, max_tokens=60, overlap=20)]
    assert len(chunks) > 2
    (summary,) = extractive.summarize_many([chunks], max_tokens=2000)
    assert summary == document


def test_most_central_sentence_wins_a_tight_budget(extractive: ExtractiveSummarizer) -> None:
    (summary,) = extractive.summarize_many([CATS], max_tokens=12)
    assert "stock" not in summary.lower()
    assert "cat" in summary.lower()


def test_query_focus_changes_the_choice(extractive: ExtractiveSummarizer) -> None:
    (general,) = extractive.summarize_many([CATS], max_tokens=12)
    (focused,) = extractive.summarize_many([CATS], max_tokens=12, query="Why did the stock fall?")
    assert focused != general
    assert "stock market fell" in focused


def test_query_sharing_no_word_keeps_the_centrality_order(
    extractive: ExtractiveSummarizer,
) -> None:
    general = extractive.summarize_many([CATS], max_tokens=20)
    assert extractive.summarize_many([CATS], max_tokens=20, query="zebra quantum") == general


def test_one_text_and_identical_texts_give_the_same_summary(
    extractive: ExtractiveSummarizer,
) -> None:
    one = extractive.summarize_many([[CATS[0]]], max_tokens=20)
    same = extractive.summarize_many([[CATS[0], CATS[0], CATS[0]]], max_tokens=20)
    assert one == same
    assert one[0]


def test_texts_without_word_characters_keep_the_first_sentences(
    extractive: ExtractiveSummarizer,
) -> None:
    (summary,) = extractive.summarize_many([["!!! ??? ...", "--- *** +++"]], max_tokens=500)
    assert summary == "!!! ??? ... --- *** +++"
    (short,) = extractive.summarize_many([["!!! ??? ...", "--- *** +++"]], max_tokens=3)
    assert short.startswith("!!!")
    assert count_tokens(short) <= 3


def test_overlong_best_sentence_is_cut_at_a_character_boundary() -> None:
    text = "日本語のテキストは句読点なしで長く続きます" * 20
    for tokenizer in (default_tokenizer(), ByteTokenizer()):
        (summary,) = ExtractiveSummarizer(tokenizer).summarize_many([[text]], max_tokens=7)
        assert summary
        assert text.startswith(summary)
        assert "\ufffd" not in summary
        assert len(tokenizer.encode(summary)) <= 7


def test_whitespace_is_collapsed_inside_sentences(extractive: ExtractiveSummarizer) -> None:
    (summary,) = extractive.summarize_many(
        [["First   line\nwraps here.\n\nSecond one."]], max_tokens=50
    )
    assert summary == "First line wraps here. Second one."


@pytest.mark.parametrize("group", [[], [""], ["  \n\t", ""]])
def test_empty_group_is_an_error(extractive: ExtractiveSummarizer, group: list[str]) -> None:
    with pytest.raises(SummarizationError, match="group 1 has no text"):
        extractive.summarize_many([CATS, group], max_tokens=20)


def test_max_tokens_below_one_is_an_error(extractive: ExtractiveSummarizer) -> None:
    with pytest.raises(SummarizationError, match="max_tokens must be at least 1, got 0"):
        extractive.summarize_many([CATS], max_tokens=0)


def test_extractive_counts_calls_and_no_tokens() -> None:
    summarizer = ExtractiveSummarizer()
    summarizer.summarize_many([CATS, CATS[:1]], max_tokens=20)
    assert (summarizer.calls, summarizer.prompt_tokens, summarizer.completion_tokens) == (2, 0, 0)


def test_query_weight_out_of_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="query_weight"):
        ExtractiveSummarizer(query_weight=1.5)


_ALPHABET = st.sampled_from(
    [*"abcdefghij XYZ0123 .!?,;\n", "é", "ß", "日本", "語", "🙂", "👩\u200d💻", "\u0301", "。"]
)
_TEXT = st.lists(_ALPHABET, min_size=1, max_size=120).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_TEXT, min_size=1, max_size=4), max_tokens=st.integers(4, 60))
def test_summary_never_exceeds_max_tokens(texts: list[str], max_tokens: int) -> None:
    """Any text, including multi-byte characters: <= max_tokens and no broken character."""
    if not any(t.strip() for t in texts):
        texts = [*texts, "x"]
    for tokenizer in (default_tokenizer(), ByteTokenizer()):
        (summary,) = ExtractiveSummarizer(tokenizer).summarize_many([texts], max_tokens=max_tokens)
        assert summary
        assert summary == summary.strip()
        assert len(tokenizer.encode(summary)) <= max_tokens
        assert "\ufffd" not in summary


# --- OpenAI adapter -----------------------------------------------------------------------

Handler = Callable[[httpx.Request], httpx.Response]


def completion(
    content: str | None, *, finish_reason: str = "stop", prompt: int = 11, completion: int = 5
) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": "test-model",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish_reason,
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        },
    )


def error(status: int, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"error": {"message": f"status {status}", "type": "test", "code": None}}
    return httpx.Response(status, json=body, headers=headers)


def make_client(handler: Handler, api_key: str = "test") -> openai.OpenAI:
    return openai.OpenAI(
        api_key=api_key,
        base_url="http://test/v1",
        max_retries=0,
        # openai annotates httpx2.Client; the project's httpx client works the same at runtime
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),  # type: ignore[arg-type]
    )


class Recorder:
    """Replies from a script (one response or exception per request) and keeps request bodies."""

    def __init__(self, *replies: httpx.Response | Exception) -> None:
        self.replies = list(replies)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        reply = self.replies[min(len(self.bodies), len(self.replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply


def make_summarizer(
    handler: Handler, sleeps: list[float] | None = None, **kwargs: Any
) -> OpenAISummarizer:
    recorded = sleeps if sleeps is not None else []
    return OpenAISummarizer(make_client(handler), "test-model", sleep=recorded.append, **kwargs)


def test_request_carries_model_table4_prompt_and_max_tokens() -> None:
    recorder = Recorder(completion("  A short summary.\n"))
    summarizer = make_summarizer(recorder)
    assert summarizer.summarize_many([["First text.", "Second text."]], max_tokens=64) == [
        "A short summary."
    ]
    (body,) = recorder.bodies
    assert body["model"] == "test-model"
    assert body["max_tokens"] == 64
    assert body["temperature"] == 0.0
    assert body["messages"] == [
        {"role": "system", "content": "You are a helpful assistant."},
        {
            "role": "user",
            "content": "Write a summary of the following, including as many key details as "
            "possible using at most 64 tokens: First text.\n\nSecond text.",
        },
    ]
    assert summarizer.id == "openai:test-model"
    assert summarizer.prompt_version == PROMPT_VERSION
    assert (summarizer.calls, summarizer.prompt_tokens, summarizer.completion_tokens) == (1, 11, 5)


def test_query_uses_the_table5_prompt() -> None:
    recorder = Recorder(completion("Focused."))
    make_summarizer(recorder).summarize_many([["Doc {a}."]], max_tokens=32, query="Who won?")
    messages = recorder.bodies[0]["messages"]
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert messages[1]["content"] == (
        "Summarize the information in the retrieved documents using at most 32 tokens. Make "
        "sure to include in your summary all the details that can be used to answer the "
        "question and omit any details that are entirely irrelevant to the question. Retrieved "
        "documents: Doc {a}. Question: Who won? Summary:"
    )
    assert "{context}" in SUMMARY_PROMPT
    assert "{question}" in QUERY_SUMMARY_PROMPT


def test_429_then_200_retries_once_and_succeeds() -> None:
    sleeps: list[float] = []
    recorder = Recorder(error(429), completion("ok"))
    summarizer = make_summarizer(recorder, sleeps, backoff_base=0.5)
    assert summarizer.summarize_many([["text"]], max_tokens=16) == ["ok"]
    assert len(recorder.bodies) == 2
    assert len(sleeps) == 1
    assert 0.25 <= sleeps[0] <= 0.5  # first backoff, jittered into [base/2, base]
    assert summarizer.calls == 1


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [("3", 3.0), ("1.5", 1.5), ("999", 20.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)],
)
def test_retry_after_is_honoured_and_capped(retry_after: str, expected: float) -> None:
    sleeps: list[float] = []
    recorder = Recorder(error(429, {"Retry-After": retry_after}), completion("ok"))
    make_summarizer(recorder, sleeps, backoff_max=20.0).summarize_many([["t"]], max_tokens=8)
    assert sleeps == [pytest.approx(expected)]


def test_server_error_forever_fails_after_max_retries_plus_one_attempts() -> None:
    sleeps: list[float] = []
    recorder = Recorder(error(500))
    summarizer = make_summarizer(recorder, sleeps, max_retries=3, backoff_base=1.0, backoff_max=3.0)
    with pytest.raises(SummarizationError, match="'test-model'") as info:
        summarizer.summarize_many([["text"]], max_tokens=16)
    assert len(recorder.bodies) == 4
    assert "4 attempts" in str(info.value)
    assert "http://test/v1" in str(info.value)
    assert isinstance(info.value.__cause__, SummarizationError)
    assert isinstance(info.value.__cause__.__cause__, openai.InternalServerError)
    ceilings = [1.0, 2.0, 3.0]  # base * 2**attempt, capped at backoff_max
    assert all(c / 2 <= s <= c for s, c in zip(sleeps, ceilings, strict=True))
    assert summarizer.calls == 0


@pytest.mark.parametrize(
    "failure",
    [
        error(503),
        error(429),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
    ],
    ids=["503", "429", "connect", "timeout"],
)
def test_transient_failures_are_retried(failure: httpx.Response | Exception) -> None:
    recorder = Recorder(failure, failure, completion("fine"))
    assert make_summarizer(recorder).summarize_many([["t"]], max_tokens=8) == ["fine"]
    assert len(recorder.bodies) == 3


@pytest.mark.parametrize(
    ("message", "window", "requested"),
    [  # llama.cpp's server; OpenAI; vLLM
        ("request (2077 tokens) exceeds the available context size (2048 tokens)", 2048, 2077),
        (
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens. Please reduce the length of the messages.",
            8192,
            9000,
        ),
        ("This model's maximum context length is 4096 tokens.", 4096, None),
    ],
)
def test_a_refusal_that_names_the_context_window_says_the_setting_that_fits(
    message: str, window: int, requested: int | None
) -> None:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": 400}}
    summarizer = make_summarizer(Recorder(httpx.Response(400, json=body)))
    with pytest.raises(SummarizationError) as info:
        summarizer.summarize_many([["t"]], max_tokens=8)
    refused = info.value.__cause__
    assert isinstance(refused, ContextWindowError)
    assert (refused.window, refused.requested) == (window, requested)
    assert f"context window of {window} tokens" in str(info.value)
    fits = f"ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS to at most {int(window * 0.8)}"
    assert fits in str(info.value)
    assert context_window("status 400: the server rejects parameter 'foo'") is None


@pytest.mark.parametrize(
    ("status", "fix"),
    [
        (400, "context window"),
        (401, "ADRAP_SUMMARY__OPENAI__API_KEY"),
        (403, "access rights"),
        (404, "ADRAP_SUMMARY__OPENAI__BASE_URL"),
    ],
)
def test_client_errors_are_not_retried_and_name_the_fix(status: int, fix: str) -> None:
    sleeps: list[float] = []
    recorder = Recorder(error(status))
    summarizer = OpenAISummarizer(
        make_client(recorder, api_key="sk-very-secret-key"), "test-model", sleep=sleeps.append
    )
    with pytest.raises(SummarizationError) as info:
        summarizer.summarize_many([["t"]], max_tokens=8)
    message = str(info.value)
    assert len(recorder.bodies) == 1
    assert sleeps == []
    assert fix in message
    assert f"HTTP {status}" in message
    assert "'test-model'" in message
    assert "http://test/v1" in message
    assert "sk-very-secret-key" not in message
    assert isinstance(info.value.__cause__, SummarizationError)
    assert isinstance(info.value.__cause__.__cause__, openai.APIStatusError)


@pytest.mark.parametrize(
    ("content", "finish_reason", "match"),
    [
        ("", "stop", "empty summary"),
        ("  \n ", "stop", "empty summary"),
        (None, "stop", "empty summary"),
        ("Something partial", "content_filter", "content_filter"),
    ],
)
def test_unusable_completion_is_an_error_never_text(
    content: str | None, finish_reason: str, match: str
) -> None:
    recorder = Recorder(completion(content, finish_reason=finish_reason))
    with pytest.raises(SummarizationError, match=match):
        make_summarizer(recorder).summarize_many([["t"]], max_tokens=8)
    assert len(recorder.bodies) == 1


def test_summarize_many_preserves_order_and_runs_groups_in_parallel() -> None:
    concurrency = 3
    barrier = threading.Barrier(concurrency, timeout=10)
    lock = threading.Lock()
    in_flight = 0
    peak = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        try:
            barrier.wait()  # passes only when `concurrency` requests are in flight at once
            prompt = json.loads(request.content)["messages"][1]["content"]
            return completion("summary of " + prompt.rsplit(": ", 1)[1])
        finally:
            with lock:
                in_flight -= 1

    groups = [[f"group-{i}"] for i in range(2 * concurrency)]
    summarizer = make_summarizer(handler, concurrency=concurrency, max_retries=0)
    result = summarizer.summarize_many(groups, max_tokens=8)
    assert result == [f"summary of group-{i}" for i in range(2 * concurrency)]
    assert peak == concurrency
    assert summarizer.calls == 2 * concurrency
    assert summarizer.prompt_tokens == 11 * 2 * concurrency


def test_one_failing_group_fails_the_whole_batch() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        prompt = json.loads(request.content)["messages"][1]["content"]
        return error(400) if prompt.endswith("group-2") else completion("fine")

    groups = [[f"group-{i}"] for i in range(8)]
    with pytest.raises(SummarizationError, match="group 2 of 8"):
        make_summarizer(handler, concurrency=2).summarize_many(groups, max_tokens=8)


def test_no_thread_outlives_summarize_many() -> None:
    before = set(threading.enumerate())
    recorder = Recorder(error(500))
    with pytest.raises(SummarizationError):
        make_summarizer(recorder, max_retries=1).summarize_many([["a"], ["b"]], max_tokens=8)
    assert set(threading.enumerate()) <= before


def test_empty_group_is_rejected_before_any_request() -> None:
    recorder = Recorder(completion("x"))
    with pytest.raises(SummarizationError, match="group 1 has no text"):
        make_summarizer(recorder).summarize_many([["a"], [" "]], max_tokens=8)
    assert recorder.bodies == []


def test_retry_log_never_holds_the_full_text(caplog: pytest.LogCaptureFixture) -> None:
    long_text = "secret-sentence " * 500

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text=request.content.decode())  # a server echoing the prompt

    caplog.set_level(logging.WARNING, logger="ingestor.summarize.openai_compat")
    with pytest.raises(SummarizationError) as info:
        make_summarizer(handler, max_retries=2).summarize_many([[long_text]], max_tokens=8)
    assert caplog.records
    assert all(len(r.getMessage()) < 400 for r in caplog.records)
    assert len(str(info.value)) < 500
