"""A partial repair killed with SIGKILL (real `adrap repair` subprocess, the packaged embedding
model, qdrant-edge): the next writer finds the tree as last committed — the old subtree or the
new one — with every leaf, store == state, and the repair done."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ingestor.tree.persist import load_state
from models_store import ModelStore
from testkit.cli import adrap
from testkit.corpus import doc_text
from testkit.crash import Writer, inspect

pytestmark = pytest.mark.integration


def leaves(state_dir: Path) -> set[str]:
    state = load_state(ModelStore(state_dir / "models"), "default", readonly=True)
    assert state is not None
    return set(state.ids_in_layer(0))


def test_a_repair_killed_half_way_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(11)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(40):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 10)))
    env = {
        "ADRAP_STATE_DIR": str(tmp_path / "state"),
        "ADRAP_ADRAP__REBUILD_MAX_LEAVES": "0",  # adRAP alone: drift is left for the repair
        "ADRAP_ADRAP__REPAIR_DRIFT": "0.2",
    }
    built = adrap("build", str(root), env=env)
    assert built.returncode == 0, built.stderr
    for i in range(0, 40, 2):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 10)))
    added = adrap("add", str(root), env=env)
    assert added.returncode == 0, added.stderr
    status = json.loads(adrap("status", "--json", env=env).stdout)
    assert status["drift"]["due"] >= 1, status["drift"]
    before = leaves(tmp_path / "state")
    writer = Writer(["repair", "--all"], env | {"ADRAP_STATE_DIR": str(tmp_path / "state")})
    writer.wait_line("update: intent recorded", timeout=600, poll=0.01)
    assert writer.kill(), "the repair ended before it could be killed"
    writer.finish()
    assert leaves(tmp_path / "state") == before, "killed: no leaf lost or added"
    again = adrap("repair", "--all", env=env)
    assert again.returncode == 0, again.stderr
    seen = inspect(tmp_path / "state", root)
    assert (seen.orphans, seen.missing, seen.mismatched, seen.invariants) == (0, 0, 0, 0)
    assert seen.sources_differ == 0
    assert seen.intent == "none"
    assert leaves(tmp_path / "state") == before
    status = json.loads(adrap("status", "--json", env=env).stdout)
    assert status["drift"]["due"] == 0, status["drift"]
    assert status["drift"]["repairs"] >= 1
