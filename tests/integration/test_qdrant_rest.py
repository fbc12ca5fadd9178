"""Real Qdrant clients read a running `adrap watch` (real model, real qdrant-edge) like a server.

What is compared: docs/clients.md's hybrid collapsed-tree recipe, run verbatim (its code block, with
only the URL pointed at the daemon, ``vector`` set to the question embedded with the tree's model
and ``question`` to the question): one query, a dense and a BM25 prefetch of 100 each with the
filter ``tree == "default"``, fused with DBSF, no search params (so the facade plans the dense
prefetch as adrap does), then hits in score order while the running ``n_tokens`` total stays
<= 2000, a hit of a text already taken (the folder holds copies of two files) skipped, a summary
only as the best hit of at most 500 tokens, less the
summaries that would share it with >= 30 % of their children (filled again).
``adrap query --json`` (collapsed, hybrid, ``--max-tokens 2000``: one query with the
same prefetches, filter and limit ``candidate_limit(2000) = 100``, then the same fill) must give
the same node ids in the same order.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retriever.in_process import in_process
from retriever.search import candidate_limit
from tests.integration.test_daemon import SAMPLE, Watch, watching

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JS_DIR = ROOT / "tests" / "js"
RECIPE_URL = "http://127.0.0.1:8765"
QUESTIONS = ["What did Lincoln say about the nation?", "Which freedoms does the bill protect?"]
BUDGET = 2000


def recipe_block(lang: str) -> str:
    """The code block of ``lang`` in docs/clients.md's "Any Qdrant client" section."""
    text = (ROOT / "docs" / "clients.md").read_text()
    section = text.split("## Any Qdrant client, also on the embedded store", 1)[1].split("\n## ")[0]
    found = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert found, f"no {lang} block in the docs/clients.md section"
    block = found.group(1)
    assert RECIPE_URL in block
    return block


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watch]:
    tmp = tmp_path_factory.mktemp("qdrant-rest")
    folder = tmp / "docs"
    shutil.copytree(SAMPLE, folder)
    for name in ("gettysburg-address.txt", "bill-of-rights.rst"):  # copies: the same leaves
        (folder / "copies").mkdir(exist_ok=True)
        shutil.copy(folder / name, folder / "copies" / name)
    with watching(folder, tmp / "state") as w:
        w.wait_ready()
        yield w
        assert w.stop() == 0


@pytest.fixture(scope="module")
def vectors() -> dict[str, list[float]]:
    embedder = in_process()  # what the daemon embeds with
    return {q: embedder.embed_query(q).tolist() for q in QUESTIONS}


def adrap_query(w: Watch, question: str, *flags: str) -> list[str]:
    """Node ids of ``adrap query --json [flags]`` (answered by the daemon that owns the store)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ingestor",
            "query",
            question,
            "--json",
            "--max-tokens",
            "2000",
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env | {"ADRAP_STATE_DIR": str(w.state), "HF_HUB_OFFLINE": "1"},
        cwd=w.state.parent,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return [h["node_id"] for h in json.loads(out.stdout)["hits"]]


def test_the_clients_page_python_recipe_gives_the_nodes_of_adrap_query(
    daemon: Watch, vectors: dict[str, list[float]]
) -> None:
    assert candidate_limit(BUDGET) == 100  # the recipe's limit is adrap's own
    code = recipe_block("python").replace(RECIPE_URL, daemon.base)
    for question, vector in vectors.items():
        scope: dict[str, Any] = {"vector": vector, "question": question}
        exec(code, scope)
        got = [str(hit.id) for hit in scope["taken"]]
        assert got == adrap_query(daemon, question), question
        assert len(got) >= 3
        assert scope["context"]


def test_the_client_scrolls_counts_retrieves_and_cannot_write(daemon: Watch) -> None:
    from qdrant_client import QdrantClient, models
    from qdrant_client.http.exceptions import UnexpectedResponse

    client = QdrantClient(url=daemon.base)
    info = client.get_collection("adrap")
    points, offset, seen = [], None, 0
    while True:
        page, offset = client.scroll("adrap", limit=8, offset=offset, with_payload=["layer"])
        points.extend(page)
        seen += 1
        if offset is None:
            break
    assert seen > 1
    assert len(points) == info.points_count == client.count("adrap").count
    summaries = [p for p in points if (p.payload or {}).get("layer", 0) >= 1]
    upper = models.Filter(must=[models.FieldCondition(key="layer", range=models.Range(gte=1))])
    assert client.count("adrap", count_filter=upper).count == len(summaries) > 0
    got = client.retrieve("adrap", [summaries[0].id], with_vectors=True)
    vector: Any = got[0].vector
    assert len(vector["dense"]) == info.config.params.vectors["dense"].size  # type: ignore[index]
    with pytest.raises(UnexpectedResponse) as refused:
        client.delete("adrap", points_selector=models.PointIdsList(points=[summaries[0].id]))
    assert refused.value.status_code == 403
    with pytest.raises(UnexpectedResponse) as missing:
        client.get_collection("nodes")
    assert missing.value.status_code == 404
    assert client.count("adrap").count == len(points)


def test_the_clients_page_js_recipe_with_the_npm_client_gives_the_nodes_of_adrap_query(
    daemon: Watch, vectors: dict[str, list[float]]
) -> None:
    """The real @qdrant/js-client-rest (``npm ci`` in tests/js) runs docs/clients.md's JS block."""
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "@qdrant" / "js-client-rest").is_dir():
        pytest.skip("needs node and `npm ci` in tests/js (@qdrant/js-client-rest)")
    imports, _, body = recipe_block("js").replace(RECIPE_URL, daemon.base).partition("\n\n")
    script = JS_DIR / f".recipe-{uuid.uuid4().hex}.mjs"  # beside node_modules, to resolve it
    script.write_text(
        imports
        + "\n\nconst vector = JSON.parse(process.argv[2]);\nconst question = process.argv[3];\n"
        + body
        + "\nconsole.log(JSON.stringify(taken.map((hit) => hit.id)));\n"
    )
    try:
        for question, vector in vectors.items():
            out = subprocess.run(
                [node, str(script), json.dumps(vector), question],
                capture_output=True,
                text=True,
                cwd=JS_DIR,
                timeout=120,
            )
            assert out.returncode == 0, out.stderr
            assert "incompatible" not in out.stderr  # the client's version check passed
            got = json.loads(out.stdout.strip().splitlines()[-1])
            assert got == adrap_query(daemon, question), question
            assert len(got) >= 3
    finally:
        script.unlink()
