"""``adrap status`` beside a running daemon shows the drift judged by the daemon's repair
threshold (``ADRAP_ADRAP__REPAIR_DRIFT`` as the daemon runs with it), not the threshold of the
shell that runs ``adrap status``: a daemon started with 0.3 said ``threshold: 0.5, due: 0``
to a user without the variable, while it was repairing subtrees past 0.3."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from ingestor.service.locking import state_lock
from ingestor.tree.drift import group_drifts
from testkit.corpus import make_pipeline
from testkit.daemons import make_daemon
from tests.conftest import wait_until
from tests.unit.service.test_watcher import write_corpus


def test_status_shows_the_drift_by_the_running_daemons_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    threshold = max(drifts) / 2  # some subtrees past it: due > 0 by the daemon's measure
    monkeypatch.setenv("ADRAP_ADRAP__REPAIR_DRIFT", str(threshold))
    state_dir = tmp_path / "state"
    d = make_daemon(p, root, state_dir=state_dir, socket=True, debounce=0.05)
    monkeypatch.delenv("ADRAP_ADRAP__REPAIR_DRIFT")
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.metrics.ready, timeout=60)
        monkeypatch.setenv("ADRAP_STATE_DIR", str(state_dir))
        monkeypatch.setenv("ADRAP_TREE", p.context.tree)
        with state_lock(state_dir, "watch"):  # as `adrap watch` holds it: how the CLI finds it
            result = CliRunner().invoke(main, ["status", "--json"])
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
    assert out["daemon"].startswith("adrap watch") or " at unix:" in out["daemon"], out["daemon"]
    assert out["drift"]["threshold"] == pytest.approx(threshold)
    assert out["drift"]["due"] == sum(v > threshold for v in drifts) > 0
