"""Drift beside a running daemon: ``adrap status`` judges it by the daemon's repair threshold
(``ADRAP_ADRAP__REPAIR_DRIFT`` as the daemon runs with it), not by the shell's (a daemon started
with 0.3 said ``threshold: 0.5, due: 0`` to a user without the variable while it repaired
subtrees past 0.3); ``adrap repair`` asks the daemon to repair (it answered "state dir locked by
adrap watch; stop it first")."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from ingestor.pipeline import Pipeline
from ingestor.service.daemon import Daemon
from ingestor.service.locking import state_lock
from ingestor.tree.drift import drift_summary, group_drifts
from testkit.corpus import make_pipeline
from testkit.daemons import make_daemon
from tests.conftest import wait_until
from tests.unit.service.test_watcher import write_corpus


@dataclass
class Drifted:
    pipeline: Pipeline
    daemon: Daemon
    state_dir: Path
    drifts: list[float]  # the subtrees' drift (those with leaves)
    threshold: float  # the daemon's ADRAP_ADRAP__REPAIR_DRIFT: some subtrees past it


@pytest.fixture
def drifted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Drifted]:
    root = tmp_path / "docs"
    write_corpus(root, 10)
    p = make_pipeline(tmp_path)
    p.build(root)
    gone = sorted(root.iterdir())[:3]  # drift some subtrees
    for path in gone:
        path.unlink()
    p.update(gone)
    drifts = [d.value for d in group_drifts(p.require_state()) if d.size]
    assert max(drifts, default=0) > 0
    threshold = max(drifts) / 2
    monkeypatch.setenv("ADRAP_ADRAP__REPAIR_DRIFT", str(threshold))
    monkeypatch.setenv("ADRAP_ADRAP__REPAIR_TOKENS_PER_HOUR", "1000000")
    state_dir = tmp_path / "state"
    d = make_daemon(p, root, state_dir=state_dir, socket=True, debounce=0.05)
    d.repair = replace(d.repair, tokens_per_hour=0)  # no idle repair: only the command's
    for name in ("ADRAP_ADRAP__REPAIR_DRIFT", "ADRAP_ADRAP__REPAIR_TOKENS_PER_HOUR"):
        monkeypatch.delenv(name)  # the shell that runs `adrap` has neither
    monkeypatch.setenv("ADRAP_STATE_DIR", str(state_dir))
    monkeypatch.setenv("ADRAP_TREE", p.context.tree)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.metrics.ready, timeout=60)
        yield Drifted(p, d, state_dir, drifts, threshold)
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()


def _adrap(t: Drifted, *args: str) -> str:
    with state_lock(t.state_dir, "watch"):  # as `adrap watch` holds it: how the CLI finds it
        result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_status_shows_the_drift_by_the_running_daemons_threshold(drifted: Drifted) -> None:
    out = json.loads(_adrap(drifted, "status", "--json"))
    assert " at unix:" in out["daemon"], out["daemon"]
    assert out["drift"]["threshold"] == pytest.approx(drifted.threshold)
    assert out["drift"]["due"] == sum(v > drifted.threshold for v in drifted.drifts) > 0


def test_adrap_repair_asks_the_running_daemon(drifted: Drifted) -> None:
    said = _adrap(drifted, "repair")
    assert re.match(r"1 of \d+ drifted subtrees repaired \(\d+ leaves re-clustered", said), said
    w = drifted.daemon.watcher
    assert w is not None
    assert drift_summary(w.state, drifted.threshold)["repairs"] == 1
    assert drift_summary(drifted.pipeline.require_state(), drifted.threshold)["repairs"] == 1
