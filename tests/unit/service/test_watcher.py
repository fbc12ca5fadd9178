"""The watcher: handler only enqueues, debounced batches, ignore rules, moves, retries, observers.

Fast fakes (hashed embeddings, echo summaries) beside the real parts: TreeClusterer, qdrant-edge.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from watchdog.events import (
    DirModifiedEvent,
    FileClosedEvent,
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
)

from ingestor.errors import SummarizationError
from ingestor.pipeline import Pipeline
from ingestor.service.events import Change
from ingestor.service.watcher import EnqueueHandler, Watcher, make_observer
from ingestor.tree.invariants import violations
from ingestor.tree.persist import held_rows
from testkit.corpus import doc_text, make_pipeline
from testkit.daemons import make_daemon, make_watcher, watched_move
from testkit.fakes import CountingEmbedder, EchoSummarizer, FakeClock
from tests.conftest import wait_until


class FlakySummarizer(EchoSummarizer):
    """Raises SummarizationError on its first ``failures`` calls, like an LLM that is down."""

    def __init__(self, failures: int = 0) -> None:
        super().__init__()
        self.failures = failures

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        if self.failures > 0:
            self.failures -= 1
            raise SummarizationError("endpoint http://llm/v1 returned 503; check the server")
        return super().summarize_many(groups, max_tokens=max_tokens, query=query)


def write_corpus(root: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 8)))


def on_disk(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.txt")}


def assert_agrees(p: Pipeline, root: Path, state: Any = None) -> None:
    """The committed state lists exactly the files on disk and the store exactly its nodes."""
    committed = p.require_state()
    assert set(committed.sources) == on_disk(root)
    assert violations(committed) == []
    assert set(p.context.store.iter_ids("t")) == set(committed.nodes)
    if state is not None:
        assert set(state.sources) == set(committed.sources)


# -- the handler ---------------------------------------------------------------------------------


def test_handler_only_enqueues_change_events_and_both_ends_of_a_move(tmp_path: Path) -> None:
    import queue

    q: queue.Queue[Change | None] = queue.Queue()
    h = EnqueueHandler(q)
    h.dispatch(FileCreatedEvent(str(tmp_path / "a.txt")))
    h.dispatch(FileModifiedEvent(str(tmp_path / "b.txt")))
    h.dispatch(FileDeletedEvent(str(tmp_path / "c.txt")))
    h.dispatch(FileMovedEvent(str(tmp_path / "d.txt"), str(tmp_path / "e.txt")))
    h.dispatch(FileOpenedEvent(str(tmp_path / "f.txt")))
    h.dispatch(FileClosedNoWriteEvent(str(tmp_path / "f.txt")))
    h.dispatch(DirModifiedEvent(str(tmp_path)))
    h.dispatch(FileClosedEvent(str(tmp_path / "b.txt")))
    got = [q.get_nowait() for _ in range(q.qsize())]
    assert [(c.path.name, c.changed, c.complete) for c in got if c] == [
        ("a.txt", True, False),
        ("b.txt", True, False),
        ("c.txt", True, False),
        ("d.txt", True, False),
        ("e.txt", True, True),  # moved into place: complete at once
        ("b.txt", False, True),  # closed after writing: a completion mark, no change
    ]


# -- batching ------------------------------------------------------------------------------------


def test_a_burst_of_events_is_coalesced_into_one_batch_after_the_quiet_period(
    tree: tuple[Pipeline, Path],
) -> None:
    p, root = tree
    clock = FakeClock()
    w = make_watcher(p, p.require_state(), root, debounce=0.3, clock=clock)
    for i in range(20):  # an event every 10 ms
        path = root / f"x{i % 5}.txt"
        clock.after(0.01 * i, lambda path=path: w.handler.dispatch(FileModifiedEvent(str(path))))
    batch = w.next_batch()
    assert batch == {root / f"x{i}.txt" for i in range(5)}
    assert clock.now == pytest.approx(0.19 + 0.3)  # waited for 0.3 s of quiet after the last
    assert w.paths.empty()


def test_ignored_hidden_temp_and_state_dir_paths_are_dropped(
    tree: tuple[Pipeline, Path], tmp_path: Path
) -> None:
    p, root = tree
    w = make_watcher(p, p.require_state(), root, exclude=[root / "state"])
    for name in [".git/HEAD", "~$report.docx", "a.swp", "b.tmp", "c.part", ".#d.txt", "e.txt~"]:
        assert not w.wanted(root / name), name
    assert not w.wanted(root / "state" / "x.txt")
    assert not w.wanted(tmp_path / "elsewhere.txt")
    assert w.wanted(root / "notes" / "good file é.txt")


def test_worker_applies_a_batch_and_the_tree_equals_the_folder(tree: tuple[Pipeline, Path]) -> None:
    p, root = tree
    w = make_watcher(p, p.require_state(), root, debounce=0.1)
    (root / "new.txt").write_text(doc_text(random.Random(5), 6))
    (root / "d1.txt").unlink()
    (root / "d2.txt").write_text(doc_text(random.Random(6), 5))
    (root / "junk.swp").write_text("editor swap")
    for name in ["new.txt", "d1.txt", "d2.txt", "junk.swp"]:
        w.handler.dispatch(FileModifiedEvent(str(root / name)))
    assert w.apply(w.next_batch())
    assert w.batches == 1
    report = w.last_report
    assert report is not None
    assert (report.files_added, report.files_changed, report.files_removed) == (1, 1, 1)
    assert_agrees(p, root, w.state)


def test_a_rename_with_unchanged_content_reuses_the_leaf_vectors(
    tree: tuple[Pipeline, Path],
) -> None:
    p, root = tree
    w = make_watcher(p, p.require_state(), root, debounce=0.05)
    emb = p.context.embedder
    assert isinstance(emb, CountingEmbedder)
    leaves = {w.state.nodes[i].text for i in w.state.sources["d3.txt"].node_ids}
    before = len(emb.texts)
    report = watched_move(w, root / "d3.txt", root / "renamed.txt")
    assert (report.files_added, report.files_removed) == (0, 0)
    assert report.files_moved == 1
    assert not leaves & set(emb.texts[before:]), "no leaf of the renamed file is embedded again"
    assert_agrees(p, root, w.state)


def test_a_directory_move_and_a_save_by_temp_file_and_rename_end_in_agreement(
    tree: tuple[Pipeline, Path],
) -> None:
    p, root = tree
    w = make_watcher(p, p.require_state(), root, debounce=0.05)
    sub = root / "sub"
    write_corpus(sub, 3, seed=9)
    w.handler.dispatch(FileCreatedEvent(str(sub)))
    assert w.apply(w.next_batch())
    sub.rename(root / "moved")
    w.handler.dispatch(FileMovedEvent(str(sub), str(root / "moved")))
    tmp = root / ".d0.txt.tmp"  # an editor's save: write a temp file, rename over the original
    tmp.write_text(doc_text(random.Random(11), 4))
    w.handler.dispatch(FileCreatedEvent(str(tmp)))
    tmp.replace(root / "d0.txt")
    w.handler.dispatch(FileMovedEvent(str(tmp), str(root / "d0.txt")))
    assert w.apply(w.next_batch())
    assert w.batches == 2
    assert_agrees(p, root, w.state)


@contextmanager
def retrying_watcher(
    tmp_path: Path, summarizer: EchoSummarizer, drift_threshold: float = 100.0
) -> Iterator[tuple[Pipeline, Path, Watcher, list[str]]]:
    """A built tree, its watcher on a driven clock (no backoff is slept), and the error kinds."""
    root = tmp_path / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp_path, summarizer, drift_threshold=drift_threshold)
    try:
        p.build(root)
        root = root.resolve()
        w = make_watcher(p, p.require_state(), root, debounce=0.05, clock=FakeClock())
        errors: list[str] = []
        w.on_error = errors.append
        yield p, root, w, errors
    finally:
        p.context.store.close()


def test_a_failing_summariser_commits_nothing_and_the_batch_is_retried_until_applied(
    tmp_path: Path,
) -> None:
    flaky = FlakySummarizer()
    with retrying_watcher(tmp_path, flaky) as (p, root, w, errors):
        generation = p.require_state().generation
        for i in range(3):
            path = root / f"n{i}.txt"
            path.write_text(doc_text(random.Random(20 + i), 6))
            w.handler.dispatch(FileCreatedEvent(str(path)))
        flaky.failures = 2
        batch = w.next_batch()
        assert not w.apply(batch)
        assert p.require_state().generation == generation, "nothing committed"
        assert w.paths.empty()
        assert w.pending() == 3
        assert not w.apply(w.next_batch())
        assert set(p.context.store.iter_ids("t")) == set(p.require_state().nodes)
        assert w.apply(w.next_batch())
        assert errors == ["SummarizationError", "SummarizationError"]
        assert w.pending() == 0
        assert_agrees(p, root, w.state)


def test_a_store_that_fails_mid_update_commits_nothing_and_the_batch_is_retried(
    tmp_path: Path,
) -> None:
    """A Qdrant server that drops out while points are written: back off, keep the paths."""
    from retriever import StoreError

    with retrying_watcher(tmp_path, EchoSummarizer()) as (p, root, w, errors):
        generation = p.require_state().generation
        real_upsert = p.context.store.upsert
        outages = [2]

        def upsert(nodes, vectors):  # type: ignore[no-untyped-def]
            if outages[0]:
                outages[0] -= 1
                raise StoreError("Qdrant server at http://qdrant:6333 is unreachable")
            return real_upsert(nodes, vectors)

        p.context.store.upsert = upsert  # type: ignore[method-assign]
        path = root / "late.txt"
        path.write_text(doc_text(random.Random(5), 6))
        w.handler.dispatch(FileCreatedEvent(str(path)))
        assert not w.apply(w.next_batch())
        assert not w.apply(w.next_batch())
        assert p.require_state().generation == generation, "nothing committed"
        assert w.pending() == 1
        assert w.apply(w.next_batch())
        assert errors == ["StoreError", "StoreError"]
        assert_agrees(p, root, w.state)


def test_an_unexpected_error_isolates_the_offending_path_and_the_rest_of_the_batch_lands(
    tmp_path: Path,
) -> None:
    """Issue 9 item 2: a bug on one file used to be retried forever with every later batch."""
    with retrying_watcher(tmp_path, EchoSummarizer()) as (p, root, w, errors):
        real = p.apply_batch

        def apply_batch(state, docs, gone, report):  # type: ignore[no-untyped-def]
            if any(d.source == "bad.txt" for d in docs):
                state.sources.clear()  # a half-applied change in memory, then a bug
                raise RuntimeError("parser bug")
            return real(state, docs, gone, report)

        p.apply_batch = apply_batch  # type: ignore[method-assign]
        for i, name in enumerate(["a.txt", "b.txt", "bad.txt", "c.txt"]):
            (root / name).write_text(doc_text(random.Random(60 + i), 5))
            w.handler.dispatch(FileCreatedEvent(str(root / name)))
        for _ in range(6):
            if w.pending() == 0 and not w.paths.qsize():
                break
            w._guarded(w.next_batch())
        assert w.pending() == 0
        assert set(w.quarantine.items()) == {"bad.txt"}
        assert "parser bug" in w.quarantine.items()["bad.txt"].reason
        sources = set(p.require_state().sources)
        assert {"a.txt", "b.txt", "c.txt"} <= sources
        assert "bad.txt" not in sources
        assert errors
        assert set(errors) == {"RuntimeError"}
        # unchanged, it stays out of later batches; once edited (and the bug fixed) it lands
        w.handler.dispatch(FileModifiedEvent(str(root / "bad.txt")))
        assert w.apply(w.next_batch())
        assert "bad.txt" not in p.require_state().sources
        p.apply_batch = real  # type: ignore[method-assign]
        (root / "bad.txt").write_text(doc_text(random.Random(99), 5))
        w.handler.dispatch(FileModifiedEvent(str(root / "bad.txt")))
        assert w.apply(w.next_batch())
        assert "bad.txt" in p.require_state().sources
        assert len(w.quarantine) == 0
        assert_agrees(p, root, w.state)


def test_unreadable_and_outward_symlinked_files_are_skipped_and_the_worker_keeps_going(
    tree: tuple[Pipeline, Path], caplog: pytest.LogCaptureFixture
) -> None:
    p, root = tree
    w = make_watcher(p, p.require_state(), root, debounce=0.05)
    (root / "binary.txt").write_bytes(b"\x00\x01\x02" * 100)
    (root / "empty.md").write_text("")
    (root / "bad.txt").write_bytes(random.Random(5).randbytes(3000))  # garbage, not a codepage
    (root / "passwd.txt").symlink_to("/etc/passwd")
    (root / "loop.txt").symlink_to(root / "loop.txt")
    (root / "dangling.txt").symlink_to(root / "nowhere.txt")
    (root / "a name with spaces é.txt").write_text(doc_text(random.Random(3), 4))
    # a known file turns binary: its last readable version stays, shown as stale, until it changes
    (root / "d4.txt").write_bytes(b"\x00" * 50)
    for f in root.iterdir():
        w.handler.dispatch(FileModifiedEvent(str(f)))
    with caplog.at_level("WARNING"):
        assert w.apply(w.next_batch())
    text = caplog.text
    for name in ["binary.txt", "empty.md", "bad.txt", "passwd.txt", "loop.txt", "d4.txt"]:
        assert name in text, name
    sources = set(w.state.sources)
    assert "a name with spaces é.txt" in sources
    assert "d4.txt" in sources
    stale = p.collector.unread.get("d4.txt")
    assert stale is not None
    assert stale.kind == "stale"
    assert stale.kept
    assert "binary" in stale.reason
    assert "last readable version is kept" in stale.reason
    assert "passwd.txt" not in sources
    # Listed with its reason, as `adrap build` lists it (the daemon used to drop it unlisted).
    outward = p.collector.unread.get("passwd.txt")
    assert outward is not None
    assert outward.kind == "skipped"
    assert "outside the root" in outward.reason
    # A link that loops is refused for good, as a folder's listing refuses it (it was "cannot
    # be reached now", retried every few seconds with nothing that could ever change it).
    loop = p.collector.unread.get("loop.txt")
    assert loop is not None
    assert loop.kind == "skipped"
    assert "link that loops" in loop.reason
    dangling = p.collector.unread.get("dangling.txt")  # was "its folder cannot be listed now"
    assert dangling is not None
    assert dangling.kind == "skipped"
    assert "broken symlink" in dangling.reason


def test_stop_applies_what_is_pending_and_joins_the_worker(tree: tuple[Pipeline, Path]) -> None:
    p, root = tree
    w = make_watcher(p, p.require_state(), root, debounce=30.0)
    w.start()
    (root / "late.txt").write_text(doc_text(random.Random(8), 5))
    w.handler.dispatch(FileCreatedEvent(str(root / "late.txt")))
    wait_until(w.paths.empty, what="the worker taking the change")  # in hand, for 30 s
    w.stop(timeout=30)
    assert "late.txt" in p.require_state().sources


# -- real observers ------------------------------------------------------------------------------


@pytest.mark.parametrize("polling", [False, True], ids=["native", "polling"])
def test_a_real_observer_picks_up_create_modify_and_delete(
    tree: tuple[Pipeline, Path], polling: bool
) -> None:
    p, root = tree
    w = make_watcher(p, p.require_state(), root, debounce=0.2)
    observer = make_observer(polling=polling, interval=0.2)
    observer.schedule(w.handler, str(root), recursive=True)
    observer.start()
    w.start()
    try:
        (root / "made.txt").write_text(doc_text(random.Random(30), 5))
        (root / "d5.txt").write_text(doc_text(random.Random(31), 5))
        (root / "d6.txt").unlink()
        (root / "sub").mkdir()
        (root / "sub" / "deep.md").write_text(doc_text(random.Random(32), 4))

        def agrees() -> bool:
            return set(p.require_state().sources) == on_disk(root) | {"sub/deep.md"}

        wait_until(agrees)
    finally:
        observer.stop()
        observer.join()
        w.stop(timeout=30)
    assert p.require_state().sources["d5.txt"].content_hash != ""
    assert set(p.context.store.iter_ids("t")) == set(p.require_state().nodes)


def test_a_burst_of_500_files_created_edited_and_deleted_ends_in_exact_agreement(
    tmp_path: Path,
) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp_path)
    try:
        p.build(root)
        root = root.resolve()
        # a burst ends once no event came for 0.5 s: a busy machine cannot split it by a pause
        w = make_watcher(p, p.require_state(), root, debounce=0.3, clock=FakeClock(patience=0.5))
        observer = make_observer()
        observer.schedule(w.handler, str(root), recursive=True)
        observer.start()
        w.start()
        rng = random.Random(4)
        try:
            for i in range(500):
                (root / f"b{i}.txt").write_text(f"Burst file {i}. " + doc_text(rng, 2))
            for i in range(0, 500, 3):
                (root / f"b{i}.txt").write_text(f"Edited file {i}. " + doc_text(rng, 2))
            for i in range(0, 500, 5):
                (root / f"b{i}.txt").unlink()
            wait_until(lambda: set(p.require_state().sources) == on_disk(root), timeout=60)
        finally:
            observer.stop()
            observer.join()
            w.stop(timeout=60)
        assert_agrees(p, root, w.state)
        assert w.batches < 20, "a burst is coalesced into few batches"
    finally:
        p.context.store.close()


# -- the daemon (reconciliation + HTTP) ------------------------------------------------------------


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def post(url: str) -> tuple[int, str]:
    return get(urllib.request.Request(url, data=b"", method="POST"))  # type: ignore[arg-type]


def test_reconcile_applies_offline_changes_and_repairs_orphan_and_missing_points(
    tree: tuple[Pipeline, Path],
) -> None:
    p, root = tree
    state = p.require_state()
    some = sorted(state.nodes)[:3]
    p.context.store.delete(some)  # missing points
    orphan = state.payloads([sorted(state.nodes)[5]])[0].model_copy(update={"node_id": "0" * 32})
    p.context.store.upsert([orphan], state.matrix([sorted(state.nodes)[5]]))
    (root / "d0.txt").unlink()
    (root / "offline.txt").write_text(doc_text(random.Random(40), 5))
    report = p.reconcile(root)
    assert (report.files_added, report.files_removed) == (1, 1)
    assert_agrees(p, root)


def test_reconcile_refuses_a_state_built_over_another_folder(
    tree: tuple[Pipeline, Path], tmp_path: Path
) -> None:
    p, _ = tree
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(Exception, match="was built over"):
        p.reconcile(other)


def test_daemon_serves_health_readiness_metrics_status_and_query(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp_path)
    d = make_daemon(p, root, debounce=0.1, http_port=0)
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.address is not None)
        assert d.address is not None
        base = "http://{}:{}".format(*d.address)
        assert get(base + "/healthz")[0] == 200
        wait_until(lambda: get(base + "/readyz")[0] == 200, timeout=60)
        (root / "zebra.txt").write_text(
            "Zebras graze on the savanna. Stripes confuse lions at dusk."
        )
        wait_until(lambda: json.loads(get(base + "/status")[1])["updates_applied"] >= 1)
        code, body = get(base + "/query?q=zebras+savanna+stripes&max_tokens=300")
        assert code == 200
        out = json.loads(body)
        assert any(h["source"] == "zebra.txt" for h in out["hits"])
        code, text = get(base + "/metrics")
        assert code == 200
        samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        for line in samples:
            float(line.rsplit(" ", 1)[1])
        assert 'adrap_files{tree="t"} 9.0' in text
        assert 'adrap_update_seconds_bucket{le="+Inf",tree="t"} 1.0' in text
        assert 'adrap_quarantined_files{tree="t"} 0.0' in text
        assert get(base + "/query")[0] == 400
        code, body = get(base + "/query?q=zebras+savanna+stripes&mode=postqfrap&k0=6")
        assert code == 200, body
        out = json.loads(body)
        assert out["mode"] == "postqfrap"
        assert any(s["source"] == "zebra.txt" for part in out["parts"] for s in part["spans"])
        code, body = get(base + "/query?q=zebras&mode=postqfrap&k0=100000")
        assert code == 400
        assert "k0 must be between 1 and 200" in body
        assert get(base + "/ask?q=zebras")[0] == 405  # POST only: it spends LLM tokens
        code, body = post(base + "/ask?q=zebras+savanna+stripes&max_tokens=300")
        assert code == 200, body
        out = json.loads(body)
        assert out["answered"] is False
        assert "no LLM configured" in out["reason"]
        assert out["parts"]
        assert get(base + "/nope")[0] == 404
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
    assert not t.is_alive()


def test_idle_maintenance_runs_when_quiet_and_never_while_paths_wait(
    tree: tuple[Pipeline, Path],
) -> None:
    """The daemon builds the search index in idle time (``on_idle``), not inside an update."""
    p, root = tree
    calls: list[int] = []
    w = make_watcher(
        p, p.require_state(), root, debounce=0.05, on_idle=lambda: calls.append(1), idle_after=0.3
    )
    w.start()
    try:
        wait_until(lambda: len(calls) >= 1, timeout=10)
        (root / "new.txt").write_text(doc_text(random.Random(5), 5))
        before = len(calls)
        w.enqueue([root / "new.txt"])
        wait_until(lambda: w.batches >= 1 and w.pending() == 0, timeout=60)
        assert len(calls) - before <= 1, "at most the check that ran before the path arrived"
        wait_until(lambda: len(calls) >= before + 1, timeout=10)  # idle again: runs again
    finally:
        w.stop()
    assert_agrees(p, root)


def test_past_its_bound_the_worker_drops_the_rows_it_holds_after_a_batch(
    tree: tuple[Pipeline, Path],
) -> None:
    p, root = tree
    held = {}
    for bound in (None, 0):
        w = make_watcher(p, p.require_state(), root, debounce=0.05, max_held_rows=bound)
        (root / f"held{bound}.txt").write_text(doc_text(random.Random(7), 6))
        w.handler.dispatch(FileModifiedEvent(str(root / f"held{bound}.txt")))
        assert w.apply(w.next_batch())
        held[bound] = held_rows(w.state)
        assert f"held{bound}.txt" in w.state.sources  # read again once dropped
    assert held[None] > 0
    assert held[0] == 0


def test_background_steps_run_between_batches_and_a_failed_one_stops_no_update(
    tree: tuple[Pipeline, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change of embedding model copies the tree in steps between the daemon's updates: the
    steps run whenever no batch is ready, under the writer's lock, with the committed state; a
    failing step (its endpoint down) is logged and retried later while updates land; once the
    steps say none remains, the worker opens the state again (the switched tree's)."""
    import ingestor.service.watcher as watcher_module

    monkeypatch.setattr(watcher_module, "STEP_RETRY", 0.2)
    p, root = tree
    lock = threading.Lock()
    seen: list[str] = []
    fail = [True]
    states: list[Any] = []

    def step(state: Any) -> bool:
        assert lock.locked(), "a step runs under the writer's lock"
        states.append(state)
        if fail[0]:
            fail[0] = False
            raise RuntimeError("endpoint down")
        seen.append(str(state.generation))
        time.sleep(0.05)  # a step takes time: maintenance runs between steps too
        return len(seen) < 5

    idle: list[int] = []
    w = make_watcher(
        p,
        p.require_state(),
        root,
        debounce=0.05,
        lock=lock,
        step=step,
        on_idle=lambda: idle.append(len(states)),
        idle_after=0.1,
    )
    first = w.state
    w._stale = True  # as a failed batch or permission pass leaves it
    w.start()
    try:
        (root / "new.txt").write_text(doc_text(random.Random(6), 5))
        w.enqueue([root / "new.txt"])
        wait_until(lambda: w.batches >= 1 and w.pending() == 0, timeout=60)
        wait_until(lambda: w.step is None, timeout=30)
    finally:
        w.stop()
    assert len(seen) == 5, "the failed step was retried; steps stop once none remains"
    assert any(0 < n < len(states) for n in idle), "idle maintenance ran during the steps"
    assert states[0] is not first, "a state a failed update left half-applied is opened again"
    assert w.state is not states[-1], "and again once the steps are done (the switched tree's)"
    assert_agrees(p, root)
