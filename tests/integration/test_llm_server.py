"""OpenAISummarizer against a real OpenAI-compatible server (llama.cpp via xllamacpp, SmolLM2-135M).

SmolLM2-135M writes poor summaries: these tests check the plumbing (prompts accepted, limits,
concurrency, errors), not the quality.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import openai
import pytest

from ingestor.errors import SummarizationError
from ingestor.read.tokens import count_tokens
from ingestor.summarize.openai_compat import OpenAISummarizer
from testkit.servers import LLMServer

pytestmark = pytest.mark.integration

TEXTS = [
    "The Rhine flows from the Swiss Alps to the North Sea. It passes Basel and Cologne.",
    "Barges on the Rhine carry coal, grain and containers. Rotterdam is the largest port on it.",
    "In 1986 a chemical spill at Basel turned the river red and killed many fish downstream.",
]
MAX_TOKENS = 48


@pytest.fixture
def client(llm_server: LLMServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key="none", base_url=llm_server.base_url, max_retries=0) as c:
        yield c


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_real_server_returns_a_short_non_empty_summary(
    client: openai.OpenAI, llm_server: LLMServer
) -> None:
    summarizer = OpenAISummarizer(client, llm_server.model, timeout=60.0)
    (summary,) = summarizer.summarize_many([TEXTS], max_tokens=MAX_TOKENS)
    assert summary
    assert summary == summary.strip()
    assert 0 < summarizer.completion_tokens <= MAX_TOKENS  # the server's own token count
    assert count_tokens(summary) <= 2 * MAX_TOKENS  # cl100k differs from SmolLM2's tokenizer
    assert summarizer.calls == 1
    assert summarizer.prompt_tokens > 0


def test_real_server_summarizes_three_groups_two_at_a_time(
    client: openai.OpenAI, llm_server: LLMServer
) -> None:
    summarizer = OpenAISummarizer(client, llm_server.model, concurrency=2, timeout=60.0)
    groups = [[text] for text in TEXTS]
    summaries = summarizer.summarize_many(groups, max_tokens=32)
    assert len(summaries) == 3
    assert all(summaries)
    assert summarizer.calls == 3


def test_real_server_accepts_the_query_focused_prompt(
    client: openai.OpenAI, llm_server: LLMServer
) -> None:
    summarizer = OpenAISummarizer(client, llm_server.model, timeout=60.0)
    (summary,) = summarizer.summarize_many(
        [TEXTS], max_tokens=32, query="What happened at Basel in 1986?"
    )
    assert summary


def test_wrong_api_path_fails_at_once_with_the_fix(llm_server: LLMServer) -> None:
    """llama.cpp serves any model name it is sent, so a wrong path is the 404 to test."""
    root = llm_server.base_url.removesuffix("/v1")
    sleeps: list[float] = []
    with openai.OpenAI(api_key="none", base_url=f"{root}/wrong/v1", max_retries=0) as c:
        summarizer = OpenAISummarizer(c, llm_server.model, sleep=sleeps.append)
        with pytest.raises(SummarizationError, match="HTTP 404") as info:
            summarizer.summarize_many([TEXTS], max_tokens=16)
    assert "ADRAP_SUMMARY__OPENAI__BASE_URL" in str(info.value)
    assert sleeps == []


def test_closed_port_fails_after_retries(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}/v1"
    with openai.OpenAI(api_key="none", base_url=url, max_retries=0) as c:
        summarizer = OpenAISummarizer(
            c, "smollm2", max_retries=2, backoff_base=0.01, backoff_max=0.05, timeout=5.0
        )
        with pytest.raises(SummarizationError, match="after 3 attempts") as info:
            summarizer.summarize_many([TEXTS], max_tokens=16)
    assert f"127.0.0.1:{closed_port}" in str(info.value)
    assert "'smollm2'" in str(info.value)


def test_a_reachable_server_passes_the_check_and_a_closed_port_fails_it(
    client: openai.OpenAI, llm_server: LLMServer, closed_port: int
) -> None:
    OpenAISummarizer(client, llm_server.model).check_reachable()
    url = f"http://127.0.0.1:{closed_port}/v1"
    with (
        openai.OpenAI(api_key="none", base_url=url, max_retries=0) as c,
        pytest.raises(SummarizationError, match="start the server") as info,
    ):
        OpenAISummarizer(c, "smollm2").check_reachable(timeout=5.0)
    assert f"127.0.0.1:{closed_port}" in str(info.value)
