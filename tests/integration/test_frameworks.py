"""LangChain's and LlamaIndex's QdrantVectorStore read a running `adrap watch` (docs/agents.md).

Each recipe's code block runs verbatim, its URL pointed at the daemon and ``question`` set, and
must return the nodes of ``adrap query --dense-only --json`` in order (a collapsed query's hits
are the score-ordered search taken while the budget holds), less the summaries adrap's fill left
out because their children are in its context, each result's metadata saying its layer and, for
a leaf, its file and span. Dense only: the frameworks' stores search the dense vector, where
``adrap query`` also fuses BM25.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_daemon import SAMPLE, Watch, watching
from tests.integration.test_qdrant_rest import adrap_query

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
DOC_URL = "http://127.0.0.1:8765"
QUESTIONS = ["Which freedoms does the bill protect?", "Why did the fox call the grapes sour?"]
K = 5


def recipe(framework: str) -> str:
    """The Python block under ``### <framework>`` in docs/agents.md."""
    text = (ROOT / "docs" / "agents.md").read_text()
    section = text.split(f"### {framework}\n", 1)[1].split("\n#", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, f"no python block under {framework}"
    assert DOC_URL in found.group(1)
    return found.group(1)


def needs(module: str, dist: str) -> pytest.MarkDecorator:
    """Skip, with one line saying what to install, when ``module`` is not installed."""
    try:
        absent = importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # its parent package is absent
        absent = True
    return pytest.mark.skipif(absent, reason=f"needs {dist}: pip install 'adrap[frameworks]'")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watch]:
    tmp = tmp_path_factory.mktemp("frameworks")
    shutil.copytree(SAMPLE, tmp / "docs")
    with watching(tmp / "docs", tmp / "state") as w:
        w.wait_ready()
        yield w
        assert w.stop() == 0


def check_ranking(found: list[str], layers: list[int], want: list[str], question: str) -> None:
    """``found`` (a framework's nearest nodes, best first) is the start of adrap's fill ``want``,
    but for summaries the fill left out (those that repeat children it holds)."""
    kept = [i for i in found if i in want]
    assert kept == want[: len(kept)], question
    assert len(kept) >= 2, question
    left_out = [layer for i, layer in zip(found, layers, strict=True) if i not in want]
    assert all(layer >= 1 for layer in left_out), question


def run(framework: str, w: Watch, question: str) -> dict[str, Any]:
    scope: dict[str, Any] = {"question": question}
    exec(recipe(framework).replace(DOC_URL, w.base), scope)
    return scope


def check_place(meta: dict[str, Any], *, file: str, start: str, end: str) -> None:
    """A leaf's metadata names its file and span; a summary's its layer."""
    assert meta["layer"] >= 0
    if meta["layer"] == 0:
        assert meta[file].endswith((".md", ".txt", ".rst", ".html"))
        assert 0 <= meta[start] < meta[end]


@needs("langchain_qdrant", "langchain-qdrant")
def test_the_langchain_recipe_gives_the_nodes_of_adrap_query(daemon: Watch) -> None:
    for question in QUESTIONS:
        found = run("LangChain", daemon, question)["found"]
        want = adrap_query(daemon, question, "--dense-only")
        assert len(want) >= K
        ids, layers = [d.metadata["_id"] for d, _ in found], [d.metadata["layer"] for d, _ in found]
        check_ranking(ids, layers, want, question)
        for doc, _ in found:
            assert doc.page_content  # content_payload_key="text"
            assert "text" not in doc.metadata  # the metadata object, not a copy of the payload
            span = doc.metadata.get("span") or [None, None]
            meta = doc.metadata | {"start": span[0], "end": span[1]}
            check_place(meta, file="file", start="start", end="end")
        assert any(doc.metadata["layer"] == 0 for doc, _ in found)


@needs("llama_index.vector_stores.qdrant", "llama-index-vector-stores-qdrant")
def test_the_llamaindex_recipe_gives_the_nodes_of_adrap_query(daemon: Watch) -> None:
    for question in QUESTIONS:
        result = run("LlamaIndex", daemon, question)["result"]
        want = adrap_query(daemon, question, "--dense-only")
        layers = [node.metadata["layer"] for node in result.nodes]
        check_ranking([node.node_id for node in result.nodes], layers, want, question)
        for node in result.nodes:
            assert node.text
            check_place(node.metadata, file="source", start="char_start", end="char_end")
