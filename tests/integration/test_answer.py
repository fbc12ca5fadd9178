"""postQFRAP and ``adrap ask`` with the real local LLM server (xllamacpp + SmolLM2-135M).

SmolLM2-135M's answers are poor: these tests check the plumbing (the prompts sent, the budget,
citations resolving to real text, failures), not the quality.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ingestor.answer.service import QueryDefaults, QueryService
from ingestor.cli.factories import make_embedder
from ingestor.config import Settings
from ingestor.read.documents import read_document
from ingestor.read.tokens import count_tokens
from ingestor.summarize.openai_compat import OpenAISummarizer
from retriever.edge_store import EdgeNodeStore
from testkit.servers import LLMServer
from tests.conftest import DATA
from tests.integration.test_end_to_end import adrap

pytestmark = pytest.mark.integration
QUESTION = "What did the little white bird throw down to Cinderella?"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tree (real embedder, extractive summaries) over the first 6,000 characters of Cinderella."""
    tmp = tmp_path_factory.mktemp("answer")
    docs = tmp / "docs"
    docs.mkdir()
    (docs / "cinderella.txt").write_text(
        (DATA / "cinderella" / "cinderella.txt").read_text()[:6000]
    )
    state = tmp / "state"
    result = adrap("build", str(docs), state=state)
    assert result.returncode == 0, result.stderr
    return state, docs


@pytest.fixture
def recorded(llm_server: LLMServer) -> Iterator[tuple[OpenAISummarizer, list[dict[str, Any]]]]:
    """The real server behind an httpx hook that records every request body."""
    bodies: list[dict[str, Any]] = []

    def record(response: httpx.Response) -> None:
        if response.status_code == 200:  # a timed-out attempt that was retried has no response
            bodies.append(json.loads(response.request.content))

    llm, client = real_llm(llm_server, record)
    yield llm, bodies
    client.close()


def real_llm(
    server: LLMServer, hook: Callable[[httpx.Response], None]
) -> tuple[OpenAISummarizer, openai.OpenAI]:
    """The adapter over ``server``, each response seen by ``hook``; and its client, to close."""
    http = httpx.Client(event_hooks={"response": [hook]}, timeout=300)
    client = openai.OpenAI(
        api_key="none",
        base_url=server.base_url,
        max_retries=0,
        http_client=http,  # type: ignore[arg-type]  # openai annotates httpx2.Client
    )
    return OpenAISummarizer(client, server.model, timeout=300.0), client


def service_over(
    state: Path, store: EdgeNodeStore, defaults: QueryDefaults, **kwargs: Any
) -> QueryService:
    """A query service over the built tree's ``store``, its model the state's."""
    settings = Settings(_env_file=None, state_dir=state)  # type: ignore[call-arg]
    return QueryService(store, make_embedder(settings), settings.tree, defaults=defaults, **kwargs)


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_postqfrap_and_ask_with_the_real_server_send_the_papers_prompts_and_cite_real_spans(
    built: tuple[Path, Path], recorded: tuple[OpenAISummarizer, list[dict[str, Any]]]
) -> None:
    state, docs = built
    llm, bodies = recorded
    store = EdgeNodeStore(state / "qdrant")
    try:
        service = service_over(
            state, store, QueryDefaults(k0=4, answer_tokens=60), summarizer=llm, llm=llm
        )
        out = service.ask({"q": QUESTION, "mode": "postqfrap", "max_tokens": 120})
    finally:
        store.close()
    summary, answer = bodies  # k0=4 ≤ 10 nodes: no clustering, one final summary, one answer
    user = summary["messages"][1]["content"]
    assert user.startswith("Summarize the information in the retrieved documents using at most 120")
    assert user.endswith(f"Question: {QUESTION} Summary:")
    assert summary["max_tokens"] == 120
    assert "Question Answering Portal" in answer["messages"][0]["content"]
    assert "Sources: [1] " in answer["messages"][0]["content"]
    assert QUESTION in answer["messages"][1]["content"]
    assert out["answered"] is True
    assert out["answer"].strip()
    (part,) = out["parts"]  # the final summary, attributed to the 4 retrieved leaves
    assert count_tokens(part["text"]) <= 120
    assert len(part["node_ids"]) == 4
    text = read_document(docs / "cinderella.txt", docs, max_bytes=10**6).text
    for span in part["spans"]:
        assert span["source"] == "cinderella.txt"
        assert text[span["char_start"] : span["char_end"]].strip()
    for citation in out["citations"]:  # SmolLM2 may cite nothing; what it cites must resolve
        assert citation["spans"] == part["spans"]
    assert out["postqfrap"]["summary_calls"] == 1
    assert out["answer_calls"] == 1
    assert out["postqfrap"]["prompt_tokens"] > 0


def test_ask_with_an_unreachable_llm_fails_with_one_clear_line_and_prints_no_answer(
    built: tuple[Path, Path],
) -> None:
    state, _ = built
    env = {
        "ADRAP_SUMMARY__BACKEND": "openai",
        "ADRAP_SUMMARY__OPENAI__BASE_URL": "http://127.0.0.1:9/v1",  # discard port: refused
        "ADRAP_SUMMARY__OPENAI__MAX_RETRIES": "0",
    }
    result = adrap("ask", QUESTION, state=state, env=env)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "answer by model" in result.stderr
    assert "127.0.0.1:9" in result.stderr


def test_ask_without_an_llm_says_so_in_one_line_and_prints_the_context(
    built: tuple[Path, Path],
) -> None:
    state, _ = built
    result = adrap("ask", QUESTION, "--mode", "postqfrap", "--max-tokens", "200", state=state)
    assert result.returncode == 0, result.stderr
    assert "no LLM configured" in result.stderr
    assert result.stdout.startswith("[1] cinderella.txt:")
    assert "bird" in result.stdout


def test_changes_digest_by_the_real_server_cites_the_summaries_that_changed(
    built: tuple[Path, Path], llm_server: LLMServer
) -> None:
    state, _ = built
    env = {
        "ADRAP_SUMMARY__BACKEND": "openai",
        "ADRAP_SUMMARY__OPENAI__BASE_URL": llm_server.base_url,
        "ADRAP_SUMMARY__OPENAI__MODEL": llm_server.model,
        "ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS": "700",  # short prompts: a fast test
        "ADRAP_ANSWER__MAX_TOKENS": "48",  # the digest's answer too: CPU time, not coverage
    }
    result = adrap("changes", "--digest", "--llm", "--json", state=state, env=env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [r["kind"] for r in out["records"]] == ["build"]
    digest = out["digest"]
    assert digest["parts"], "the build's summaries as they are now (or its leaves: no layer)"
    assert all(p["file"] == "cinderella.txt" for p in digest["parts"] if p["layer"] == 0)
    assert digest["answer"].strip()
    assert digest["model"] == llm_server.model
    assert len(digest["answer"].split()) <= 48, "ADRAP_ANSWER__MAX_TOKENS bounds the digest"
    numbers = {p["n"] for p in digest["parts"]}
    for citation in digest["citations"]:  # SmolLM2 may cite nothing; what it cites must exist
        assert citation["n"] in numbers


def test_ask_fits_a_model_whose_context_window_is_smaller_than_the_setting(
    built: tuple[Path, Path],
) -> None:
    """A local server with a 512-token context and ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS at
    its 12,000 default: the first answer's prompt is refused as too long (HTTP 400, the server
    naming its window); adrap drops the least relevant parts to fit that window and asks again,
    and the next question fits at once (it answered 502 with the summary setting's advice)."""
    from testkit.servers import running_llm_server

    state, _ = built
    statuses: list[int] = []
    with running_llm_server(n_ctx=512, parallel=1) as server:
        llm, client = real_llm(server, lambda r: statuses.append(r.status_code))
        store = EdgeNodeStore(state / "qdrant")
        try:
            service = service_over(
                state,
                store,
                QueryDefaults(answer_tokens=60),
                llm=llm,
                answer_input_limit=Settings(_env_file=None).summary.openai.max_input_tokens,  # type: ignore[call-arg]
            )
            out = service.ask({"q": QUESTION, "max_tokens": 2000})
            assert statuses == [400, 200], statuses
            assert out["answered"] is True
            assert out["answer"].strip()
            assert out["parts_dropped"] > 0
            assert out["parts"], "the parts that fit are kept"
            assert service.answer_input_limit is not None
            assert service.answer_input_limit < 512
            statuses.clear()
            again = service.ask({"q": "Who was at the ball?", "max_tokens": 2000})
            assert statuses == [200], "the window was kept for the next question"
            assert again["answered"] is True
        finally:
            store.close()
            client.close()
