"""The daemon on a real share: guard against a missing share, settle, skip by stat, never block
queries, stop a first build on SIGTERM, and an HTTP surface with limits and a token."""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from watchdog.events import FileCreatedEvent, FileDeletedEvent, FileModifiedEvent

from ingestor.errors import ConfigError, SourceUnavailableError
from ingestor.pipeline import load_state
from ingestor.service.http import HttpLimits
from ingestor.service.share import SHARE_FILE, ShareGuard
from testkit.daemons import make_daemon, make_watcher
from testkit.fakes import EchoSummarizer, FakeClock
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline, on_disk, write_corpus
from tests.unit.tree.test_adrap import doc_text

Tree = tuple[Any, Path]


def _unmount(root: Path, aside: Path) -> None:
    """Replace the share by its bare (empty) mount point."""
    shutil.move(str(root), str(aside))
    root.mkdir()


def _remount(root: Path, aside: Path) -> None:
    root.rmdir()
    shutil.move(str(aside), str(root))


# -- the share guard ---------------------------------------------------------------------------


def test_an_empty_mount_point_pauses_deletions_and_they_resume_when_the_share_returns(
    tree: Tree, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 9 item 5: an unmounted share used to delete every document of the tree."""
    p, root = tree
    guard = ShareGuard(root, tmp_path / "state")
    guard.record()
    w = make_watcher(p, p.require_state(), root, debounce=0.05, guard=guard)
    before = set(p.require_state().sources)
    _unmount(root, tmp_path / "aside")
    for name in before:
        w.handler.dispatch(FileDeletedEvent(str(root / name)))
    with caplog.at_level("WARNING"):
        assert w.apply(w.next_batch())
    assert set(p.require_state().sources) == before, "nothing was deleted"
    assert guard.status()["deletions_paused"]
    assert "deletions paused" in caplog.text
    assert guard.unavailable(len(before)) is not None
    _remount(root, tmp_path / "aside")
    (root / "d0.txt").unlink()  # really deleted while the share was away
    assert guard.unavailable(len(before)) is None
    guard.resume()
    w.enqueue([root])
    assert w.apply(w.next_batch())
    assert set(p.require_state().sources) == on_disk(root)
    assert guard.status()["deletions_paused"] is None


def test_a_missing_root_or_another_device_is_a_missing_share(tmp_path: Path) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "a.txt").write_text("x")
    guard = ShareGuard(root, tmp_path)
    guard.record()
    assert json.loads((tmp_path / SHARE_FILE).read_text())["st_dev"] == os.stat(root).st_dev
    assert guard.unavailable(1) is None
    (tmp_path / SHARE_FILE).write_text(
        json.dumps({"root": str(root), "st_dev": os.stat(root).st_dev + 1})
    )
    assert "another device" in (ShareGuard(root, tmp_path).unavailable(1) or "")
    shutil.rmtree(root)
    assert "missing" in (guard.unavailable(1) or "")


def test_a_scan_removing_most_documents_waits_for_confirmation(tree: Tree, tmp_path: Path) -> None:
    p, root = tree
    guard = ShareGuard(root, None, max_delete_fraction=0.5)
    w = make_watcher(p, p.require_state(), root, debounce=0.05, guard=guard)
    gone = sorted(on_disk(root))[:6]  # 6 of 8
    for name in gone:
        (root / name).unlink()
        w.handler.dispatch(FileDeletedEvent(str(root / name)))
    assert w.apply(w.next_batch())
    assert set(gone) <= set(p.require_state().sources), "held, not deleted"
    assert guard.status()["awaiting_confirmation"] == {"would_remove": 6, "documents": 8}
    guard.confirm()
    w.enqueue([root])
    assert w.apply(w.next_batch())
    assert set(p.require_state().sources) == on_disk(root)
    assert guard.status()["awaiting_confirmation"] is None


def test_the_daemon_started_on_an_empty_mount_point_deletes_nothing(tmp_path: Path) -> None:
    """The issue's scenario: build, stop, share replaced by an empty mount point, start."""
    root = tmp_path / "docs"
    write_corpus(root, 6)
    p = make_pipeline(tmp_path)
    p.build(root)
    make_daemon(p, root).guard.record()  # as the first daemon run does
    n_points = len(set(p.context.store.iter_ids("t")))
    _unmount(root, tmp_path / "aside")
    d = make_daemon(p, root, debounce=0.05)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.metrics.ready and d.api.status()["deletions_paused"] is not None)
        assert len(p.require_state().sources) == 6
        assert len(set(p.context.store.iter_ids("t"))) == n_points
        _remount(root, tmp_path / "aside")
        wait_until(lambda: d.api.status()["deletions_paused"] is None, timeout=20)
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
    assert len(p.require_state().sources) == 6


def test_a_share_that_goes_away_is_reported_and_watched_again_when_it_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A share moved away (or unmounted) produced no event: the daemon logged nothing, /status
    and /readyz said nothing, and once it came back as a new directory (a remount) its inotify
    watch still pointed at the old one, so no change in it was ever applied again."""
    root = tmp_path / "docs"
    write_corpus(root, 6)
    p = make_pipeline(tmp_path)
    p.build(root)
    d = make_daemon(p, root, debounce=0.05, root_check_interval=0.1)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    with caplog.at_level("WARNING"):
        t.start()
        try:
            wait_until(lambda: d.metrics.ready)
            assert d.api.status()["watched_folder"] == {"available": True, "problem": None}
            aside = tmp_path / "aside"
            shutil.move(str(root), str(aside))  # the share goes away
            wait_until(lambda: d.api.status()["watched_folder"]["problem"] is not None)
            assert "is missing" in d.api.status()["watched_folder"]["problem"]
            assert "is missing" in caplog.text
            assert len(p.require_state().sources) == 6, "nothing deleted"
            shutil.copytree(aside, root)  # back, as another directory (a remount)
            wait_until(lambda: d.api.status()["watched_folder"]["available"])
            (root / "new.txt").write_text(doc_text(random.Random(7), 3))
            wait_until(lambda: "new.txt" in p.require_state().sources)
            (root / "d1.txt").unlink()
            wait_until(lambda: "d1.txt" not in p.require_state().sources)
        finally:
            stop.set()
            t.join(60)
            p.context.store.close()
    assert set(p.require_state().sources) == on_disk(root)


@pytest.mark.parametrize("polling", [False, True])
def test_a_daemon_started_while_its_share_is_away_answers_and_watches_it_once_back(
    tmp_path: Path, polling: bool
) -> None:
    """A share not mounted yet when the daemon starts (a reboot): the observer's start failed
    on the missing root and the daemon died, so a supervisor restarted it in a loop and no
    query was answered. It now answers from the tree, deletes nothing, and watches the share
    once it is back."""
    root = tmp_path / "docs"
    write_corpus(root, 4)
    p = make_pipeline(tmp_path)
    p.build(root)
    aside = tmp_path / "aside"
    shutil.move(str(root), str(aside))  # away before the daemon starts
    d = make_daemon(p, root, debounce=0.05, root_check_interval=0.1, polling=polling)
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            d.run(stop)
        except BaseException as exc:  # what the thread died of, for the test
            failed.append(exc)

    t = threading.Thread(target=run)
    t.start()
    try:
        wait_until(lambda: d.metrics.ready or bool(failed))
        assert not failed, f"the daemon died: {failed}"
        wait_until(lambda: d.api.status()["watched_folder"]["problem"] is not None)
        assert d.api.query({"q": "the tree", "max_tokens": "200"})["hits"], "not answered"
        assert len(p.require_state().sources) == 4, "nothing deleted"
        shutil.move(str(aside), str(root))
        wait_until(lambda: d.api.status()["watched_folder"]["available"])
        (root / "new.txt").write_text(doc_text(random.Random(7), 3))
        wait_until(lambda: "new.txt" in p.require_state().sources)
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
    assert not failed
    assert set(p.require_state().sources) == on_disk(root)


def test_a_first_daemon_over_a_missing_folder_says_so_and_builds_nothing(tmp_path: Path) -> None:
    p = make_pipeline(tmp_path)
    d = make_daemon(p, tmp_path / "not-mounted", http_port=-1)
    with pytest.raises(SourceUnavailableError, match=r"not-mounted.*no tree was built"):
        d.run(threading.Event())
    assert load_state(p.context.models, p.context.tree) is None
    p.context.store.close()


def test_the_root_check_never_reads_the_writers_state(tmp_path: Path) -> None:
    """The check runs in its own thread: it counts documents from the writer's snapshot, never
    from the state a batch may be changing (``len(state.sources)`` there loads every source
    row into a cache the writer is mutating)."""
    root = tmp_path / "docs"
    write_corpus(root, 3)
    p = make_pipeline(tmp_path)
    p.build(root)
    d = make_daemon(p, root)

    class Untouchable:
        @property
        def state(self) -> None:
            raise AssertionError("the root check read the writer's state")

    d.watcher = Untouchable()  # type: ignore[assignment]
    d.metrics.snapshot(p.require_state())
    assert d.root_monitor.documents() == 3
    d.root_monitor.check()
    assert d.root_monitor.status() == {"available": True, "problem": None}
    p.context.store.close()


def test_a_root_check_that_hangs_is_reported_and_never_blocks_the_daemon(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hung mount blocks ``stat``; the check runs in its own thread and says so."""
    from ingestor.service.share import RootMonitor

    (tmp_path / "d0.txt").write_text("a document")
    guard = ShareGuard(tmp_path, None)
    release = threading.Event()
    real = guard.probe
    guard.probe = lambda documents: (release.wait(30), real(documents))[1]  # type: ignore[method-assign]
    monitor = RootMonitor(guard, lambda: 1, interval=0.05, hung_after=0.2)
    monitor.start()
    try:
        wait_until(lambda: monitor.status()["problem"] is not None)
        assert "has not answered" in monitor.status()["problem"]
        assert monitor.status()["available"] is False
        with caplog.at_level("WARNING"):
            assert not monitor.poll(), "a hung root is not back"
        assert "has not answered" in caplog.text
        release.set()
        wait_until(monitor.poll)  # it answers again: watched afresh and rescanned
        assert monitor.status() == {"available": True, "problem": None}
    finally:
        release.set()
        monitor.stop()


# -- polling: settle ----------------------------------------------------------------------------


def test_in_polling_mode_a_file_is_taken_only_once_its_size_and_mtime_are_stable(
    tree: Tree,
) -> None:
    """Issue 9 item 7: a file still being copied onto a share used to be indexed half."""
    p, root = tree
    clock = FakeClock()
    w = make_watcher(p, p.require_state(), root, debounce=0.05, settle=0.3, clock=clock)
    big = root / "copying.txt"
    big.write_text(doc_text(random.Random(1), 3))
    w.handler.dispatch(FileCreatedEvent(str(big)))
    assert w.apply(w.next_batch())
    assert "copying.txt" not in w.state.sources, "first sighting: not yet"
    assert w.pending() == 1
    with big.open("a") as f:  # the copy goes on
        f.write(doc_text(random.Random(2), 3))
    w.handler.dispatch(FileModifiedEvent(str(big)))
    assert w.apply(w.next_batch())
    assert "copying.txt" not in w.state.sources, "changed since the last poll: not yet"
    looked = clock.now
    assert w.apply(w.next_batch())  # waits `settle`, sees the same size and mtime
    assert clock.now - looked >= 0.3, "the second look came before the settle time"
    assert p.require_state().sources["copying.txt"].size == big.stat().st_size


def test_in_polling_mode_a_file_not_written_for_the_settle_time_is_taken_at_first_sight(
    tree: Tree,
) -> None:
    """A second look costs a whole poll interval of latency; a file whose mtime is already older
    than the settle time is not being written (a late-found save, a copy that kept its mtime)."""
    p, root = tree
    w = make_watcher(p, p.require_state(), root, debounce=0.05, settle=30.0)
    done = root / "copied.txt"
    done.write_text(doc_text(random.Random(3), 3))
    old = time.time() - 60
    os.utime(done, (old, old))
    w.handler.dispatch(FileCreatedEvent(str(done)))
    assert w.apply(w.next_batch())
    assert "copied.txt" in w.state.sources
    assert w.pending() == 0


# -- restart: skip unchanged files by stat -----------------------------------------------------


def test_restart_reads_no_unchanged_file(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 9 item 6: reconciliation used to read, decode and hash every file."""
    import ingestor.read.documents as documents

    p, root = tree
    read: list[str] = []
    real = documents._read_bytes

    def counting(real_path: Path, root: Path, name: str, max_bytes: int) -> Any:
        read.append(name)
        return real(real_path, root, name, max_bytes)

    monkeypatch.setattr(documents, "_read_bytes", counting)
    # the build read files written within the 2 s mtime granularity: those are read once more
    # (racily clean), and their entries, now trusted, are committed
    aged = time.time() - 60
    for f in root.iterdir():
        os.utime(f, (aged, aged))
    p.reconcile(root)
    assert len(read) == 8
    read.clear()
    report = p.reconcile(root)
    assert read == []
    assert report.files_unchanged == 8
    (root / "d2.txt").write_text(doc_text(random.Random(77), 4))
    os.utime(root / "d2.txt", (aged + 30, aged + 30))
    p.reconcile(root)
    assert read == ["d2.txt"]
    entry = p.require_state().sources["d2.txt"]
    st = (root / "d2.txt").stat()
    assert (entry.size, entry.mtime_ns, entry.inode) == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_restart_reads_an_edit_whose_mtime_was_put_back(tree: Tree) -> None:
    """An edit of the same size made while the daemon was down, its mtime then restored (``cp
    -p``, ``tar``, ``rsync -t``, a backup restore, ``touch -r``), kept size, mtime and inode:
    the restart trusted the stat and the tree answered from the old text. The inode's change
    time moved (nothing sets it back), so the file is read."""
    p, root = tree
    aged = time.time() - 60
    for f in root.iterdir():
        os.utime(f, (aged, aged))
    p.reconcile(root)  # the build's racily clean entries, now trusted
    assert p.reconcile(root).files_unchanged == 8
    f = root / "d3.txt"
    st = f.stat()
    old = f.read_text()
    new = "zorbium edit" + old[12:]
    assert len(new.encode()) == st.st_size
    assert new != old
    time.sleep(0.01)  # a change time the build did not see
    f.write_text(new)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = f.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
    )
    report = p.reconcile(root)
    assert report.files_unchanged == 7
    entry = p.require_state().sources["d3.txt"]
    assert entry.ctime_ns == after.st_ctime_ns
    texts = [n.text for n in p.require_state().nodes.values() if n.source == "d3.txt"]
    assert any("zorbium edit" in t for t in texts), "the edit was not read"
    assert p.reconcile(root).files_unchanged == 8, "and its new stat is trusted afterwards"


# -- queries never wait for the writer ---------------------------------------------------------


class BlockingSummarizer(EchoSummarizer):
    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.block = False

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        if self.block:
            self.entered.set()
            self.release.wait(30)
        return super().summarize_many(groups, max_tokens=max_tokens, query=query)


def test_a_query_is_answered_while_the_writer_summarises(tmp_path: Path) -> None:
    """Issue 9 item 4: /query used to take the lock the worker holds during summarisation."""
    root = tmp_path / "docs"
    write_corpus(root, 8)
    llm = BlockingSummarizer()
    p = make_pipeline(tmp_path, llm, drift_threshold=0.0)  # the update is a rebuild: it summarises
    p.build(root)
    d = make_daemon(p, root, debounce=0.05)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.metrics.ready)
        llm.block = True
        (root / "new.txt").write_text(doc_text(random.Random(3), 6))
        assert d.watcher is not None
        d.watcher.enqueue([root / "new.txt"])
        assert llm.entered.wait(30), "the writer is summarising"
        answers: list[dict[str, Any]] = []
        q = threading.Thread(target=lambda: answers.append(d.api.query({"q": "orchard harvest"})))
        q.start()
        q.join(20)  # the writer stays in its summary until released (or 30 s have passed)
        assert answers, "the query waited for the writer"
        assert not llm.release.is_set(), "answered while the writer still summarised"
        assert answers[0]["hits"]
    finally:
        llm.release.set()
        stop.set()
        t.join(60)
        p.context.store.close()


# -- SIGTERM during the first build --------------------------------------------------------------


def test_stop_during_the_first_build_stops_it_before_its_summaries_and_commits_nothing(
    tmp_path: Path,
) -> None:
    """Issue 9 item 8: SIGTERM used to wait for the whole first build."""
    root = tmp_path / "docs"
    write_corpus(root, 30)
    p = make_pipeline(tmp_path)
    d = make_daemon(p, root)
    stop = threading.Event()

    def progress(stage: str, done: int, total: int) -> None:
        if stage.startswith("embed"):
            stop.set()  # SIGTERM arrives during the build

    d.run(stop, progress)  # returns: the daemon does not go on to watch
    assert isinstance(p.context.builder.summaries.summarizer, EchoSummarizer)
    assert p.context.builder.summaries.summarizer.calls == 0, (
        "the build went on to summarise after SIGTERM"
    )
    assert load_state(p.context.models, "t", p.context.embedder) is None
    p.context.store.close()


# -- HTTP ---------------------------------------------------------------------------------------


def _call(url: str, token: str | None = None, data: bytes | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_http_needs_a_token_off_loopback_checks_it_and_bounds_parameters(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp_path)
    with pytest.raises(ConfigError, match="ADRAP_WATCH__HTTP_TOKEN"):
        make_daemon(p, root, http_host="0.0.0.0", http_port=0).start_http()
    d = make_daemon(
        p, root, http_port=0, http_token="s3cret", limits=HttpLimits(max_tokens=5000, max_top_k=20)
    )
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.address is not None)
        assert d.address is not None
        base = "http://{}:{}".format(*d.address)
        assert _call(base + "/healthz")[0] == 200  # health checks need no token
        wait_until(lambda: _call(base + "/readyz")[0] == 200, timeout=60)
        assert _call(base + "/status")[0] == 401
        assert _call(base + "/status", "wrong")[0] == 401
        code, body = _call(base + "/status", "s3cret")
        assert code == 200
        assert json.loads(body)["quarantined"] == {}
        assert _call(base + "/query?q=orchard&max_tokens=999999", "s3cret")[0] == 400
        assert _call(base + "/query?q=orchard&top_k=21", "s3cret")[0] == 400
        assert _call(base + "/query?q=orchard&max_tokens=500", "s3cret")[0] == 200
        assert _call(base + "/retry", "s3cret", data=b"x" * 100_000)[0] == 413
        code, body = _call(base + "/retry", "s3cret", data=b"")
        assert (code, json.loads(body)) == (200, {"released": []})
        code, text = _call(base + "/metrics", "s3cret")
        assert code == 200
        assert "adrap_pending_events" in text
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
