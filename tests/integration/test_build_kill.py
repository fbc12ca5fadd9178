"""A first build stopped or killed half-way, as a user meets it: real `adrap build` / `adrap watch`
subprocesses, the real embedding model, qdrant-edge and a real local LLM (SmolLM2 via llama.cpp)
behind a proxy that counts the summaries it is asked for.

Paid work survives: run again, the build asks the LLM only for the summaries the stopped one had
not stored; between the two, readers see no tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingestor.pipeline import load_state
from ingestor.tree.invariants import violations
from ingestor.tree.persist import checkpoint_path
from ingestor.tree.state import TreeState
from models_store import ModelStore
from retriever.edge_store import EdgeNodeStore
from testkit.servers import LLMServer
from tests.integration.test_daemon import SAMPLE, Watch, get, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class CountingProxy:
    """An OpenAI-compatible endpoint that forwards to a real server and records every prompt."""

    def __init__(self, upstream: str) -> None:
        import http.server

        import httpx

        self.prompts: list[str] = []  # sha256 of each request's messages, in arrival order
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                messages = json.dumps(json.loads(body)["messages"], sort_keys=True)
                with proxy.lock:
                    proxy.prompts.append(hashlib.sha256(messages.encode()).hexdigest())
                resp = httpx.post(
                    upstream + self.path.removeprefix("/v1"),
                    content=body,
                    headers={"content-type": "application/json"},
                    timeout=120,
                )
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # client killed
                    self.send_response(resp.status_code)
                    self.send_header("content-type", "application/json")
                    self.end_headers()
                    self.wfile.write(resp.content)

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def taken(self) -> list[str]:
        """Return the prompts asked for so far, and forget them."""
        with self.lock:
            out, self.prompts = self.prompts, []
        return out

    def count(self) -> int:
        with self.lock:
            return len(self.prompts)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def proxy(llm_server: LLMServer) -> Iterator[CountingProxy]:
    out = CountingProxy(llm_server.base_url)
    yield out
    out.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "docs"
    shutil.copytree(SAMPLE, out)
    return out


def env_for(state: Path, proxy: CountingProxy, model: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
    return env | {
        "ADRAP_STATE_DIR": str(state),
        "HF_HUB_OFFLINE": "1",
        "ADRAP_CHUNK__MAX_TOKENS": "48",
        "ADRAP_CHUNK__OVERLAP": "8",
        "ADRAP_SUMMARY__BACKEND": "openai",
        "ADRAP_SUMMARY__OPENAI__BASE_URL": proxy.url,
        "ADRAP_SUMMARY__OPENAI__MODEL": model,
        "ADRAP_SUMMARY__OPENAI__CONCURRENCY": "2",
        "ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS": "1200",  # the server's slots hold 2048 tokens
        "ADRAP_SUMMARY__MAX_TOKENS": "24",
    }


def adrap(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ingestor", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def checkpointed(state: Path) -> int:
    """Summaries in the first build's checkpoint (read after the writer is gone)."""
    path = checkpoint_path(ModelStore(state / "models"), "default")
    assert path.exists(), "no checkpoint"
    with sqlite3.connect(path) as db:
        (n,) = db.execute("SELECT count(*) FROM rows WHERE ns = 'cache'").fetchone()
    return int(n)


def not_built(state: Path, env: dict[str, str], cwd: Path) -> None:
    out = adrap("status", "--json", env=env, cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["built"] is False
    assert not (state / "models" / "tree-default.sqlite").exists()


def built_tree(state: Path) -> TreeState:
    """Return the committed state after checking the store holds exactly its nodes."""
    with warnings.catch_warnings():  # unpickling imports umap, which warns that TF is absent
        warnings.simplefilter("ignore", ImportWarning)
        tree = load_state(ModelStore(state / "models"), "default", readonly=True)
    assert tree is not None
    assert violations(tree) == []
    with EdgeNodeStore(state / "qdrant") as store:
        assert set(store.iter_ids("default")) == set(tree.nodes)
    assert not checkpoint_path(ModelStore(state / "models"), "default").exists()
    return tree


def summaries_of(tree: TreeState) -> int:
    return sum(n for layer, n in tree.layer_counts().items() if layer > 0)


def test_kill_9_during_a_first_build_then_build_again_pays_only_for_the_rest(
    folder: Path, tmp_path: Path, proxy: CountingProxy, llm_server: LLMServer
) -> None:
    state = tmp_path / "state"
    env = env_for(state, proxy, llm_server.model)
    with (tmp_path / "build-1.log").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ingestor", "build", str(folder)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            # Past the first batch (2 summaries, then about 5 s of them each): some are stored.
            deadline = time.monotonic() + 600
            while proxy.count() < 8:
                assert proc.poll() is None, (tmp_path / "build-1.log").read_text()
                assert time.monotonic() < deadline, "the build asked for too few summaries"
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    killed = proxy.taken()
    stored = checkpointed(state)
    assert stored >= 2, "the batches finished before the kill are in the checkpoint"
    not_built(state, env, tmp_path)

    out = adrap("build", str(folder), env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    again = proxy.taken()
    tree = built_tree(state)
    total = summaries_of(tree)
    print(
        f"\nkill -9 after {len(killed)} summary requests ({stored} stored); the rerun asked "
        f"for {len(again)} of {total}; {out.stdout.strip()}"
    )
    assert len(again) == total - stored, "exactly the summaries not stored were asked again"
    assert len(set(again) & set(killed)) <= len(killed) - stored, "only the lost batch again"
    hits = re.search(r"\((\d+) from cache\)", out.stdout)
    assert hits is not None
    assert int(hits.group(1)) == stored


def test_sigterm_stops_the_daemons_first_build_after_its_batch_and_loses_no_summary(
    folder: Path, tmp_path: Path, proxy: CountingProxy, llm_server: LLMServer
) -> None:
    state = tmp_path / "state"
    env = env_for(state, proxy, llm_server.model)
    extra = {k: v for k, v in env.items() if k.startswith("ADRAP_") or k == "HF_HUB_OFFLINE"}
    w = Watch(folder, state, extra)
    try:
        wait_for(lambda: proxy.count() >= 6, 600, w)
        w.proc.send_signal(signal.SIGTERM)
        # a deadline, not a measure: the whole first build (the bug) takes many minutes here
        code = w.proc.wait(60)
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
    assert code == 0, w.logs()
    assert "stopped during the first build" in w.logs()
    first = proxy.taken()
    stored = checkpointed(state)
    assert stored == len(first), "the batch in hand was stored before stopping"
    not_built(state, env, tmp_path)

    w = Watch(folder, state, extra)
    try:
        w.wait_ready(600)
        assert get(w.base + "/query?q=fox")[0] == 200
        assert w.stop() == 0
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
    second = proxy.taken()
    tree = built_tree(state)
    print(
        f"\nSIGTERM after {len(first)} summaries, {len(second)} asked by the restart, "
        f"{summaries_of(tree)} in the tree"
    )
    assert set(second).isdisjoint(first), "no summary was asked for twice"
    assert len(first) + len(second) == summaries_of(tree)
