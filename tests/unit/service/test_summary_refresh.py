"""The daemon's coalesced summaries (issue 34) on a real built tree (qdrant-edge shard): an update
marks summaries stale (payload, /status, /metrics), a refresh regenerates them once, and the
window, a spent budget and POST /refresh decide when."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ingestor.pipeline import Pipeline
from ingestor.service.daemon import Daemon
from ingestor.service.summary_schedule import SummarySchedule, TokenBudget
from ingestor.tree.invariants import violations
from testkit.corpus import make_pipeline
from testkit.daemons import make_daemon, make_watcher
from testkit.fakes import QuotingSummarizer
from tests.unit.service.test_watcher import write_corpus
from tests.unit.tree.test_adrap import doc_text

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def schedule() -> SummarySchedule:
    return SummarySchedule(window=300, idle=0)


@pytest.fixture
def tree(tmp_path: Path, schedule: SummarySchedule) -> Iterator[tuple[Pipeline, Path]]:
    """The service tests' built tree, its updates asking ``schedule`` whether their summaries
    wait, as the daemon's pipeline is built."""
    root = tmp_path / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp_path, defer_summaries=schedule.defers_now)
    p.build(root)
    yield p, root.resolve()
    p.context.store.close()


@pytest.fixture
def daemon(tree: tuple[Pipeline, Path], schedule: SummarySchedule, tmp_path: Path) -> Daemon:
    p, root = tree
    d = make_daemon(p, root, http_token=TOKEN, state_dir=tmp_path / "state", summaries=schedule)
    d.watcher = make_watcher(p, p.require_state(), root, lock=d.lock, on_applied=d.api.applied)
    d.metrics.ready = True
    return d


def change(d: Daemon, name: str, seed: int) -> None:
    assert d.watcher is not None
    path = d.root / name
    path.write_text(doc_text(random.Random(seed), 8))
    assert d.watcher.apply({path})


def stale_in_store(d: Daemon) -> set[str]:
    assert d.watcher is not None
    state = d.watcher.state
    summaries = [i for i, n in state.nodes.items() if n.layer > 0]
    return {p.node_id for p in d.store.retrieve(summaries) if p.stale}


def test_an_update_defers_its_summaries_and_says_so(daemon: Daemon) -> None:
    with TestClient(daemon.app(), base_url="http://127.0.0.1:8765") as client:
        change(daemon, "new0.txt", 1)
        assert daemon.watcher is not None
        stale = set(daemon.watcher.state.stale)
        assert stale, "the update's changed clusters wait"
        assert stale_in_store(daemon) == stale, "the payload carries the stale flag"
        status = client.get("/status", headers=AUTH).json()
        assert status["summaries"]["stale"] == len(stale)
        assert status["stale_summaries"] == len(stale)
        metrics = client.get("/metrics", headers=AUTH).text
        assert f'adrap_stale_summaries{{tree="t"}} {float(len(stale))}' in metrics
        assert violations(daemon.watcher.state) == []


def test_a_refresh_pays_once_for_many_changes_and_leaves_none_stale(daemon: Daemon) -> None:
    with TestClient(daemon.app(), base_url="http://127.0.0.1:8765") as client:
        for i in range(3):
            change(daemon, f"new{i}.txt", 10 + i)
        assert daemon.watcher is not None
        assert daemon.watcher.state.stale
        assert client.get("/refresh", headers=AUTH).status_code == 405, "POST only"
        out = client.post("/refresh", headers=AUTH).json()
        assert out["refreshed"]
        assert out["summaries"]["stale"] == 0
        assert len(daemon.watcher.state.stale) == 0
        assert stale_in_store(daemon) == set()
        assert violations(daemon.watcher.state) == []
        reopened = daemon.pipeline.require_state()
        assert len(reopened.stale) == 0, "committed"


def test_the_window_and_the_budget_decide_when(daemon: Daemon) -> None:
    change(daemon, "new0.txt", 3)
    assert daemon.watcher is not None
    assert daemon.watcher.refresh(daemon.api.refresh_due) is None, "inside the window: waits"
    daemon.summaries.budget = TokenBudget(per_hour=1)
    daemon.summaries.budget.spend(5, time.monotonic())
    daemon.summaries.window = 0.0
    assert daemon.watcher.refresh(daemon.api.refresh_due) is None, "a spent budget: waits"
    daemon.summaries.budget = TokenBudget()
    report = daemon.watcher.refresh(daemon.api.refresh_due)
    assert report is not None, "the window passed: paid"
    assert len(daemon.watcher.state.stale) == 0


def test_stale_marks_survive_a_restart(daemon: Daemon, tree: tuple[Pipeline, Path]) -> None:
    change(daemon, "new0.txt", 4)
    assert daemon.watcher is not None
    stale = set(daemon.watcher.state.stale)
    p, _ = tree
    reopened = p.require_state()
    assert set(reopened.stale) == stale
    assert all(reopened.nodes[n].stale for n in stale)
    assert p.refresh(reopened).stats.summaries_regenerated > 0
    assert len(p.require_state().stale) == 0


def test_status_reads_the_writers_record_never_its_state(daemon: Daemon) -> None:
    """/status runs in an HTTP thread while the writer changes its state: the stale count and the
    oldest stamp come from what the writer recorded after its update, not from the state."""
    with TestClient(daemon.app(), base_url="http://127.0.0.1:8765") as client:
        change(daemon, "new0.txt", 5)
        assert daemon.watcher is not None
        stale = len(daemon.watcher.state.stale)
        assert stale
        writers_state, daemon.watcher.state = daemon.watcher.state, object()  # type: ignore[assignment]
        try:
            status = client.get("/status", headers=AUTH).json()
        finally:
            daemon.watcher.state = writers_state
        assert status["summaries"]["stale"] == stale
        assert status["summaries"]["oldest_stale_seconds"] is not None


def test_summaries_kept_within_tolerance_are_counted(
    daemon: Daemon, tree: tuple[Pipeline, Path]
) -> None:
    """A summary the floor rules keep (its children changed by less than ``min_change``) is not
    stale and not paid for; /status, /metrics and the update's line count it, so a user sees why
    a change bought fewer summaries than it touched."""
    p, root = tree
    builder = p.context.builder
    builder.summaries.params = dataclasses.replace(builder.summaries.params, min_change=1.0)
    assert daemon.watcher is not None
    victim = sorted(root.glob("*.txt"))[0]
    victim.write_text(victim.read_text() + " One more sentence about the same topic.")
    with TestClient(daemon.app(), base_url="http://127.0.0.1:8765") as client:
        assert daemon.watcher.apply({victim})
        status = client.get("/status", headers=AUTH).json()
        kept = status["summaries_tolerated"]
        assert kept > 0, status
        assert status["last_update"]["summaries_tolerated"] == kept
        assert f"within tolerance {kept}" in status["last_update"]["summary"]
        metrics = client.get("/metrics", headers=AUTH).text
        assert f'adrap_summaries_tolerated_total{{tree="t"}} {float(kept)}' in metrics


def test_refresh_rewrite_through_the_daemon_rewrites_another_summariser_s_summaries(
    daemon: Daemon,
) -> None:
    class Quoting(QuotingSummarizer):
        id = "quoting"

    daemon.pipeline.context.builder.summaries.summarizer = Quoting()  # the settings changed
    assert daemon.watcher is not None
    summaries = [i for i, n in daemon.watcher.state.nodes.items() if n.layer > 0]
    with TestClient(daemon.app(), base_url="http://127.0.0.1:8765") as client:
        assert not client.post("/refresh", headers=AUTH).json()["refreshed"], "nothing stale"
        assert {p.summarizer for p in daemon.store.retrieve(summaries)} == {"echo"}
        out = client.post("/refresh?rewrite=1", headers=AUTH).json()
    assert out["refreshed"]
    state = daemon.watcher.state
    ids = [i for i, n in state.nodes.items() if n.layer > 0]
    assert {p.summarizer for p in daemon.store.retrieve(ids)} == {"quoting"}
    assert daemon.pipeline.require_state().params["summarizer"] == "quoting", "committed"
    assert violations(state) == []
