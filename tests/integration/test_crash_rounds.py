"""kill -9 during updates, a few rounds of bench/crash.py: real `adrap add`/`remove` processes
(the packaged embedding model, qdrant-edge, extractive summaries) killed mid-update, read while
killed, then run again; the store must hold exactly the state's nodes with the state's payloads.
Half the rounds defer their summaries and then kill `adrap refresh`: no stale mark is lost."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from ingestor.tree.persist import load_state
from models_store import ModelStore
from retriever.edge_store import EdgeNodeStore
from testkit.crash import TREE, CrashBench, inspect, summary

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    # Reading a state unpickles umap, which warns that TensorFlow (ParametricUMAP) is absent.
    pytest.mark.filterwarnings("ignore::ImportWarning"),
]


def test_killed_updates_leave_no_orphan_no_missing_point_and_equal_payloads(
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    bench = CrashBench(tmp_path, seed=3, docs=20, out=lines.append, refresh_share=0.5)
    totals = bench.run(rounds=5, calibration=1, query_every=2)
    print("\n" + "\n".join(lines) + "\n" + summary(totals))
    assert totals.rounds == 5
    assert sum(totals.kills.values()) >= 3, "most rounds were killed mid-update"
    assert totals.orphans == totals.missing == 0, summary(totals)
    assert totals.mismatched == 0, summary(totals)
    assert totals.invariants == totals.sources_differ == 0, summary(totals)
    assert totals.missing_after_kill == totals.reader_failures == 0, summary(totals)
    assert totals.rerun_failures == 0, summary(totals)
    assert totals.recoveries_run == totals.recoveries_expected, summary(totals)
    assert totals.intents_left == 0, summary(totals)
    # Deferred rounds: `adrap refresh` killed mid-way loses no stale mark and leaves none after.
    assert totals.refreshes >= 1, summary(totals)
    assert totals.refreshed_stale >= 1, summary(totals)
    assert totals.stale_lost == totals.stale_left == 0, summary(totals)
    assert totals.failures() == 0

    # The check itself sees a stale payload, an orphan and a missing point.
    state_dir = tmp_path / "state"
    state = load_state(ModelStore(state_dir / "models"), TREE, readonly=True)
    assert state is not None
    node_ids = sorted(state.nodes)
    with EdgeNodeStore(state_dir / "qdrant") as store:
        victim, gone = store.retrieve(node_ids[:2])
        vec = store.retrieve_vectors([victim.node_id])
        store.upsert([victim.model_copy(update={"text": victim.text + " (stale)"})], vec)
        store.upsert(
            [victim.model_copy(update={"node_id": str(uuid.UUID(int=1))})],
            vec.astype(np.float32),
        )
        store.delete([gone.node_id])
        store.flush()
    seen = inspect(state_dir, tmp_path / "folder")
    assert (seen.mismatched, seen.orphans, seen.missing) == (1, 1, 1)
