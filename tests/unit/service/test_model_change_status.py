"""A change of embedding model under way is visible (issue 55): a daemon running one shows it in
``/status`` (``model_change``), ``/metrics`` (``adrap_model_change_*``) and the dashboard's
document while it copies, and nothing once it switched; ``adrap status`` shows the committed
one read from the state database. Real qdrant-edge shard; hashed embedders stand in for the two
models (tests/unit/tree/test_model_change.py)."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from numpy.typing import NDArray
from starlette.testclient import TestClient

from ingestor.cli import main
from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.model_change import ModelChange, stored_model
from ingestor.tree.persist import state_path
from testkit.daemons import make_daemon
from testkit.fakes import EchoSummarizer, HashEmbedder
from tests.conftest import wait_until

Tree = tuple[Pipeline, Path]
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Nodes per step of the change: the first step is let through, the second waits.
STEP = 8


class GatedEmbedder(HashEmbedder):
    """The "new model" (16-d): embeds the first ``STEP`` texts, then waits until ``go`` (or,
    ``killed``, dies there)."""

    def __init__(self, *, killed: bool = False) -> None:
        super().__init__(dim=16, seed=2)
        self.seen = 0
        self.killed = killed
        self.go = threading.Event()
        self.waiting = threading.Event()

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if self.seen >= STEP:
            if self.killed:
                raise RuntimeError("killed")
            self.waiting.set()
            assert self.go.wait(60), "the test never let the change go on"
        self.seen += len(texts)
        return super().embed_documents(texts)


def changing(old: Pipeline, embedder: GatedEmbedder) -> Pipeline:
    """A pipeline over ``old``'s store and state whose writers change to ``embedder``'s model."""
    ctx = old.context
    builder = TreeBuilder(
        embedder,
        EchoSummarizer(),
        lambda: TreeClusterer(random_state=0, n_epochs=50),
        TreeParams(summary_max_tokens=40),
    )
    change = ModelChange(ctx.models, ctx.tree, ctx.store, embedder, builder, batch=STEP)
    return Pipeline(
        tree=ctx.tree,
        embedder=embedder,
        builder=builder,
        store=ctx.store,
        models=ctx.models,
        chunk_tokens=40,
        chunk_overlap=8,
        drift_threshold=100.0,
        model_change=change,
    )


def _metric(text: str, name: str) -> float:
    line = next(ln for ln in text.splitlines() if ln.startswith(f'{name}{{tree="t"}}'))
    return float(line.rsplit(" ", 1)[1])


def test_a_daemon_shows_the_change_under_way_then_nothing_once_switched(
    tree: Tree, tmp_path: Path
) -> None:
    old, root = tree
    built = old.require_state()
    nodes, counts = len(built.nodes), built.layer_counts()
    gate = GatedEmbedder()
    p = changing(old, gate)
    d = make_daemon(
        p,
        root,
        state_dir=tmp_path / "state",
        http_token=TOKEN,
        query_embedder=copy.deepcopy(old.context.embedder),
    )
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t0 = time.time()
    t.start()
    try:
        with TestClient(d.app(), base_url="http://127.0.0.1:8765", headers=AUTH) as client:
            assert gate.waiting.wait(60), "the change never reached its second step"
            status = client.get("/status").json()
            shown = status["model_change"]
            assert shown == {
                "from": "hash-48",
                "to": "hash-16",
                "phase": "copy",
                "nodes_done": STEP,
                "nodes_total": nodes,
                "started_at": shown["started_at"],
            }
            assert t0 - 1 <= shown["started_at"] <= time.time()
            # the tree answering meanwhile is the one built, not an empty one
            assert status["documents"] == len(built.sources) > 0
            assert status["leaves"] == counts[0]
            assert status["nodes_per_layer"] == {str(k): v for k, v in counts.items()}
            text = client.get("/metrics").text
            assert _metric(text, "adrap_leaves") == counts[0]
            assert _metric(text, "adrap_model_change_nodes_done") == STEP
            assert _metric(text, "adrap_model_change_nodes_total") == nodes
            assert _metric(text, "adrap_model_change_started_seconds") == shown["started_at"]
            assert (
                'adrap_model_change{from_model="hash-48",phase="copy",to_model="hash-16",tree="t"}'
                " 1.0" in text
            )
            page = client.get("/dashboard/api/updates").json()
            assert page["model_change"] == shown  # the dashboard's line (updates.test.js)
            gate.go.set()
            wait_until(lambda: d.watcher is not None, timeout=60, what="the switch")
            assert client.get("/status").json()["model_change"] is None
            text = client.get("/metrics").text
            assert _metric(text, "adrap_model_change_nodes_done") == 0
            assert _metric(text, "adrap_model_change_nodes_total") == 0
            assert "adrap_model_change{" not in text
    finally:
        gate.go.set()
        stop.set()
        t.join(60)
    assert stored_model(state_path(old.context.models, "t")) == ("hash-16", 16)


def test_adrap_status_shows_the_change_the_state_records(
    tree: Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _ = tree
    nodes = len(old.require_state().nodes)
    with pytest.raises(RuntimeError, match="killed"):
        changing(old, GatedEmbedder(killed=True)).require_state(recover=True)
    monkeypatch.setenv("ADRAP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ADRAP_TREE", "t")
    out = json.loads(CliRunner().invoke(main, ["status", "--json"]).stdout)
    assert out["embed_model"] == "hash-48", "the live store is the old model's until the switch"
    assert {k: v for k, v in out["model_change"].items() if k != "started_at"} == {
        "from": "hash-48",
        "to": "hash-16",
        "phase": "copy",
        "nodes_done": STEP,
        "nodes_total": nodes,
        "running": None,  # killed: nothing runs it until a writer starts
    }
    text = CliRunner().invoke(main, ["status"]).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("model_change"))
    assert f"hash-48 -> hash-16: copy, {STEP} of {nodes} nodes embedded, started 20" in line
    assert "stopped: the next `adrap watch` or writing command resumes it" in line
