"""A chmod the native observer sees (an attribute event) reaches the points without waiting for
the scheduled permission pass, whose interval grows with a pass's length on a big share
(``ACCESS_PASS_SHARE``). Real inotify, real chmod, a real daemon over a real qdrant-edge shard."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ingestor.answer.service import QueryService
from ingestor.read.access_classes import ANONYMOUS
from ingestor.service.daemon import ACCESS_PASS_SHARE, Daemon
from ingestor.service.events import EnqueueHandler
from ingestor.service.summary_schedule import SummarySchedule
from retriever import SearchFilter
from testkit.corpus import make_pipeline as corpus_pipeline
from testkit.daemons import make_daemon
from testkit.fakes import QuotingSummarizer
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline, write_corpus

SECRET = "quokkavellum"


def _anonymous_reads(d: Daemon) -> bool:
    host, port = d.address or ("", 0)
    q = urllib.parse.urlencode({"q": f"the {SECRET} ledger", "max_tokens": "4000"})
    with urllib.request.urlopen(f"http://{host}:{port}/query?{q}", timeout=60) as resp:
        out = json.loads(resp.read().decode())
    out.pop("question", None)
    return SECRET in json.dumps(out)


def test_a_chmod_seen_by_the_observer_is_applied_long_before_the_scheduled_pass(
    tmp_path: Path,
) -> None:
    root = tmp_path / "share"
    write_corpus(root, 6)
    private = root / "private.txt"
    private.write_text(f"The {SECRET} ledger lists every payment of the garden project.\n")
    os.chmod(private, 0o600)
    p = make_pipeline(tmp_path)
    p.build(root)
    d = make_daemon(p, root, http_port=0, access_check_interval=60.0, debounce=0.05)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.metrics.ready and d.address is not None, timeout=60)
        time.sleep(1.5)  # the first pass (at start) is done: the next is 60 s away
        assert not _anonymous_reads(d)
        os.chmod(private, 0o644)
        wait_until(lambda: _anonymous_reads(d), timeout=15, what="public after the chmod")
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()


def test_an_attribute_event_asks_for_a_pass_and_queues_no_content_change(tmp_path: Path) -> None:
    from watchdog.events import DirAttribEvent, FileAttribEvent

    handler = EnqueueHandler(queue.Queue())
    handler.on_any_event(FileAttribEvent(str(tmp_path / "a.txt")))
    assert handler.attributes.is_set()
    assert handler.paths.empty(), "a chmod is not a content change"
    handler.attributes.clear()
    handler.on_any_event(DirAttribEvent(str(tmp_path)))
    assert handler.attributes.is_set()


class _Watcher:
    """A watcher whose permission pass takes ``took`` seconds (or is skipped: None)."""

    def __init__(self, took: float, ran: bool = True) -> None:
        self.handler = EnqueueHandler(queue.Queue())
        self.took, self.ran, self.passes = took, ran, 0

    def check_access(self) -> Any:
        self.passes += 1
        time.sleep(self.took)
        return object() if self.ran else None


def _daemon(watcher: _Watcher, interval: float) -> Any:
    """The fields ``Daemon._check_access`` reads, around ``watcher``; :func:`_check` runs it."""
    available = SimpleNamespace(status=lambda: {"available": True})
    d = SimpleNamespace(
        watcher=watcher,
        access_check_interval=interval,
        root_monitor=available,
        _access_checked=0.0,
        _access_took=0.0,
        _access_gap=interval,
        _access_thread=None,
        _room=lambda: None,  # the disk has room
    )
    d._access_pass = lambda asked: Daemon._access_pass(d, asked)  # type: ignore[arg-type]
    return d


def _check(d: Any) -> None:
    """One round of the main loop's check, and the pass it started (if any) to its end."""
    Daemon._check_access(d)
    if d._access_thread is not None:
        d._access_thread.join(10)


def test_the_scheduled_pass_stretches_to_a_share_of_a_core_and_an_event_comes_sooner() -> None:
    w = _Watcher(took=0.05)
    d = _daemon(w, interval=0.01)
    _check(d)  # the first pass
    assert w.passes == 1
    assert d._access_gap >= 0.05 / ACCESS_PASS_SHARE * 0.9  # ~0.5 s, not 0.01
    _check(d)
    assert w.passes == 1, "the next scheduled pass waits its stretched gap"
    w.handler.attributes.set()
    time.sleep(0.06)  # one pass's length after the last
    _check(d)
    assert w.passes == 2, "an attribute event asks for a pass sooner"
    assert not w.handler.attributes.is_set()


def test_an_event_whose_pass_could_not_run_is_kept_for_the_next_round() -> None:
    w = _Watcher(took=0.0, ran=False)
    d = _daemon(w, interval=60.0)
    d._access_checked = time.monotonic()  # the scheduled pass is a minute away
    w.handler.attributes.set()
    _check(d)
    assert w.passes == 1
    assert w.handler.attributes.is_set(), "the writer was busy: asked again next round"


def test_a_permission_pass_that_hangs_blocks_neither_the_main_loop_nor_the_stop(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A share that hangs in a pass (``stat`` blocks on a dead NFS server) left the daemon's
    main loop stuck in it: the share's hang never reported, SIGTERM never finishing. The pass
    runs on its own thread now."""
    from ingestor.service import daemon as daemon_module
    from ingestor.service.watcher import Watcher

    root = tmp_path / "share"
    write_corpus(root, 3)
    p = make_pipeline(tmp_path)
    p.build(root)
    hung, release = threading.Event(), threading.Event()

    def hanging(self: Watcher) -> Any:
        hung.set()
        release.wait(120)
        return None

    monkeypatch.setattr(Watcher, "check_access", hanging)
    monkeypatch.setattr(daemon_module, "ACCESS_STOP_WAIT", 0.5)
    d = make_daemon(p, root, access_check_interval=0.1, debounce=0.05)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        assert hung.wait(60), "no permission pass started"
        time.sleep(1.5)  # main-loop rounds go by while the pass hangs
        stop.set()
        t.join(20)
        assert not t.is_alive(), "the daemon did not stop while a permission pass hung"
    finally:
        release.set()
        stop.set()
        t.join(60)
        p.context.store.close()


def test_a_removed_private_file_s_text_in_a_stale_summary_reaches_no_stranger(
    tmp_path: Path,
) -> None:
    """The daemon defers summaries to its refresh window by default: a summary over a private
    file removed just now keeps quoting it until the refresh, and must stay its readers' (any
    Qdrant client scrolls what the reader filter lets through, ranked or not)."""
    root = tmp_path / "share"
    write_corpus(root, 10)
    secret = root / "hr" / "pay.txt"
    secret.parent.mkdir()
    secret.write_text(f"{SECRET} ledger lists every payment. Only {SECRET} holders know it.\n")
    os.chmod(secret.parent, 0o700)
    schedule = SummarySchedule(window=300.0, idle=0.0)
    p = corpus_pipeline(tmp_path, QuotingSummarizer(), defer_summaries=schedule.defers_now)
    p.build(root)
    d = make_daemon(p, root, http_port=0, summaries=schedule, debounce=0.05)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.metrics.ready and d.address is not None, timeout=60)
        applied = d.metrics.updates
        secret.unlink()
        wait_until(lambda: d.metrics.updates > applied, what="the removal applied")
        state = p.require_state()
        assert any(n.stale and SECRET in n.text for n in state.nodes.values()), "no stale quote"
        service = QueryService(
            p.context.store, p.context.embedder, "t", classes=p.context.access.registry
        )
        readable, _ = p.context.store.scroll(
            service.reader_filter(SearchFilter(tree="t"), ANONYMOUS), 10_000
        )
        assert not any(SECRET in n.text for n in readable), "a stale summary quotes it to all"
        assert not _anonymous_reads(d)
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
