"""Every file is read in a reader process under a budget (issue 57): a file that needs more
memory or time than that is killed with its reader, recorded as skipped with the reason before
anything else happens, never read again until it changes; the next file goes on.

The hostile converters live in ``hostile/sitecustomize.py``, loaded only by the reader
processes a test spawns (``PYTHONPATH``): a test process reading a file itself (the code before
issue 57) reads them as the plain text they are, and fails these tests without harm. Real
processes, real limits (``RLIMIT_AS``, SIGKILL), small budgets: 300 MiB and 2 s.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ingestor.cluster.two_step import TreeClusterer
from ingestor.errors import SourceError
from ingestor.pipeline import Pipeline, readers
from ingestor.pipeline.budget import ReadBudget, ReadBudgetError, ReadStopped
from ingestor.pipeline.chunker import ChunkedDocument, Chunker
from ingestor.pipeline.collect import Collector
from ingestor.pipeline.readers import PARALLEL_READ_SECONDS, ReadWorkers
from ingestor.pipeline.reports import BuildReport, UpdateReport
from ingestor.pipeline.unread import Unread, unread_status
from ingestor.read.documents import Document, ReadOptions
from ingestor.read.tokens import default_tokenizer
from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.params import no_progress
from models_store import ModelStore
from retriever.edge_store import EdgeNodeStore
from testkit.fakes import EchoSummarizer, HashEmbedder
from tests.conftest import wait_until
from tests.unit.pipeline.reader_tasks import reader_pid, source_of

HOSTILE = Path(__file__).resolve().parent / "hostile"
BUDGET = ReadBudget(memory_bytes=300 << 20, seconds=2.0)
OPTIONS = ReadOptions(max_bytes=10**7)
#: Bounds a wait that would hang if a reader were not killed (never a timing assertion).
HANG_GUARD = 60.0
TEXT = {
    "a.txt": "The orchard apples ripen in autumn. Farmers press cider from the harvest.",
    "c.txt": "Rockets burn liquid fuel to reach orbit. The launch window opens at dawn.",
    "d.txt": "The violin section tuned their strings. The concert began in the old hall.",
}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Readers spawned from now on convert hostile files; the names they convert go here."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(HOSTILE), os.environ.get("PYTHONPATH", "")])
    )
    out = tmp_path / "calls.txt"
    monkeypatch.setenv("HOSTILE_CALLS", str(out))
    return out


def read_names(calls: Path) -> list[str]:
    return calls.read_text().split() if calls.exists() else []


def pipeline(tmp: Path, budget: ReadBudget | None = BUDGET, workers: int = 1) -> Pipeline:
    emb = HashEmbedder(dim=16)
    p = Pipeline(
        tree="t",
        embedder=emb,
        builder=TreeBuilder(
            emb,
            EchoSummarizer(),
            lambda: TreeClusterer(random_state=0),
            TreeParams(),
            workers=workers,
        ),
        store=EdgeNodeStore(tmp / "state" / "qdrant"),
        models=ModelStore(tmp / "state" / "models"),
        chunk_tokens=16,
        chunk_overlap=4,
        read_budget=budget,
        unread=Unread(tmp / "state" / "unread.json"),
    )
    return p


def leaves(p: Pipeline) -> dict[str, str]:
    state = p.require_state()
    return {i: n.text for i, n in state.nodes.items() if n.layer == 0}


def test_a_file_that_allocates_without_bound_is_skipped_with_the_reason_and_never_read_again(
    tmp_path: Path, calls: Path
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    for name in ("a.txt", "c.txt"):
        (root / name).write_text(TEXT[name])
    (root / "b.bomb.txt").write_text("A bomb that looks like text.")
    p = pipeline(tmp_path)
    report = p.build(root)

    assert [s for s, _ in report.skipped] == ["b.bomb.txt"]
    reason = report.skipped[0][1]
    assert "needed more than 300 MiB of memory" in reason
    assert "ADRAP_READ__WORKER_MEMORY_BYTES" in reason
    assert set(p.require_state().sources) == {"a.txt", "c.txt"}  # the next file went on
    p.context.store.close()

    # a restart: the ledger on disk says why, and the bomb is not read again; a new file is
    (root / "d.txt").write_text(TEXT["d.txt"])
    again = pipeline(tmp_path)
    status = unread_status(again.collector.unread)
    assert [(r["source"], r["reason"]) for r in status["skipped_files"]] == [("b.bomb.txt", reason)]
    again.reconcile(root)
    assert read_names(calls).count("b.bomb.txt") == 1
    assert "d.txt" in again.require_state().sources
    again.context.store.close()

    # changed, it is read again (and refused again)
    (root / "b.bomb.txt").write_text("Another bomb, one byte longer.")
    third = pipeline(tmp_path)
    third.reconcile(root)
    assert read_names(calls).count("b.bomb.txt") == 2
    assert third.collector.unread.counts() == {"skipped": 1, "stale": 0}
    third.context.store.close()


def test_a_hung_conversion_is_killed_at_the_time_limit_and_the_next_file_is_read(
    tmp_path: Path, calls: Path
) -> None:
    (tmp_path / "x.hang.txt").write_text("A file whose converter never returns.")
    (tmp_path / "y.txt").write_text(TEXT["a.txt"])
    workers = ReadWorkers(BUDGET)
    first = workers.start()
    tasks = [(tmp_path / n, tmp_path, None, OPTIONS, source_of) for n in ("x.hang.txt", "y.txt")]
    try:
        (hung, error, _), (_, doc, source) = list(workers.map(tasks))
    finally:
        workers.close()
    assert hung.name == "x.hang.txt"
    assert isinstance(error, ReadBudgetError)
    assert "took longer than 2 s to read" in str(error)
    assert first.process.exitcode == -signal.SIGKILL
    assert isinstance(doc, Document)
    assert source == "y.txt"


def test_a_refusal_is_on_disk_before_the_next_file_is_handed_on(
    tmp_path: Path, calls: Path
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "a.bomb.txt").write_text("A bomb.")
    (root / "b.txt").write_text(TEXT["a.txt"])
    ledger = tmp_path / "unread.json"
    collector = Collector(readers=ReadWorkers(BUDGET), unread=Unread(ledger))
    chunker = Chunker("t", 16, 4, default_tokenizer())
    docs = collector.iter_all(root, BuildReport(), no_progress, chunker)
    try:
        doc, _ = next(docs)
        assert doc.source == "b.txt"
        on_disk = json.loads(ledger.read_text())
        assert on_disk["a.bomb.txt"]["kind"] == "skipped"
        assert "needed more than 300 MiB" in on_disk["a.bomb.txt"]["reason"]
    finally:
        docs.close()
        collector.readers.close()  # type: ignore[union-attr]


def test_a_build_and_an_update_read_in_readers_make_the_leaves_of_a_build_read_here(
    tmp_path: Path,
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    for name, text in TEXT.items():
        (root / name).write_text(text * 3)
    here = pipeline(tmp_path / "here", budget=None)
    here.build(root)
    built = pipeline(tmp_path / "built")
    built.build(root)
    # the daemon's path: one file built, the others read by an update (chunked in the reader)
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.txt").write_text(TEXT["a.txt"] * 3)
    updated = pipeline(tmp_path / "updated")
    updated.build(one)
    for name in ("c.txt", "d.txt"):
        (one / name).write_text(TEXT[name] * 3)
    docs, _ = updated.collect(updated.require_state(), [one / "c.txt"], UpdateReport())
    assert isinstance(docs[0], ChunkedDocument)  # chunked in the reader
    assert docs[0].leaves
    updated.update([one / "c.txt", one / "d.txt"])
    try:
        assert leaves(built) == leaves(here)
        assert sorted(leaves(updated).values()) == sorted(leaves(here).values())
        assert len(leaves(here)) > 3
    finally:
        for p in (here, built, updated):
            p.context.store.close()
            if p.collector.readers is not None:
                p.collector.readers.close()


def test_an_update_of_many_files_is_read_by_as_many_readers_as_the_build_may_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``adrap add`` of a folder (and the daemon's big batch, its rescan) reads the files on
    ADRAP_BUILD__WORKERS readers, in listing order, as a build does: the update read them one at
    a time in one reader."""
    monkeypatch.setattr(readers, "PARALLEL_READ_SECONDS", 0.0)  # a second reader at once,
    monkeypatch.setattr(readers, "PER_READER", 1)  # as soon as the first holds a file
    root = tmp_path / "share"
    (root / "new").mkdir(parents=True)
    (root / "a.txt").write_text(TEXT["a.txt"] * 3)
    names = [f"f{i:02d}.txt" for i in range(12)]
    for i, name in enumerate(names):
        (root / "new" / name).write_text(f"File {i} of the batch. " + TEXT["c.txt"])
    p = pipeline(tmp_path, workers=2)
    try:
        p.build(root)  # the whole share: then every file of new/ changes
        for i, name in enumerate(names):
            (root / "new" / name).write_text(f"File {i}, edited. " + TEXT["d.txt"])
        started: list[int] = []
        start = ReadWorkers.start

        def counted(self: ReadWorkers) -> Any:
            reader = start(self)
            started.append(reader.process.pid)
            return reader

        monkeypatch.setattr(ReadWorkers, "start", counted)
        assert p.collector.readers is not None
        p.collector.readers.close()  # the build's: the update starts its own
        docs, gone = p.collect(p.require_state(), [root / "new"], UpdateReport())
        assert [d.source for d in docs] == [f"new/{n}" for n in names]
        assert gone == []
        assert len(started) == 2
        assert all("edited" in d.text for d in docs)
    finally:
        p.context.store.close()
        if p.collector.readers is not None:
            p.collector.readers.close()


def test_a_reader_is_replaced_after_its_files_not_after_each(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"f{i}.txt").write_text(TEXT["a.txt"])
    workers = ReadWorkers(ReadBudget(files=2))
    tasks = [(tmp_path / f"f{i}.txt", tmp_path, None, OPTIONS, reader_pid) for i in range(5)]
    try:
        pids = [pid for _, _, pid in workers.map(tasks)]
    finally:
        workers.close()
    assert len(set(pids)) == 3
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert os.getpid() not in pids


def test_a_reader_killed_between_files_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(TEXT["a.txt"])
    workers = ReadWorkers(BUDGET)
    task = (tmp_path / "a.txt", tmp_path, None, OPTIONS, reader_pid)
    try:
        [(_, _, first)] = workers.map([task])
        os.kill(first, signal.SIGKILL)  # the OOM killer, or an operator
        workers.readers[0].process.join(HANG_GUARD)
        [(_, _, second)] = workers.map([task])
    finally:
        workers.close()
    assert second != first


def test_a_stop_kills_a_reader_busy_with_a_file(tmp_path: Path, calls: Path) -> None:
    (tmp_path / "x.hang.txt").write_text("A file whose converter never returns.")
    workers = ReadWorkers(ReadBudget(seconds=3600))
    stop = threading.Event()
    workers.stop_when(stop)
    reader = workers.start()
    raised: list[BaseException] = []

    def read() -> None:
        try:
            list(workers.map([(tmp_path / "x.hang.txt", tmp_path, None, OPTIONS, source_of)]))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    wait_for_file(calls)  # it is in the converter
    stop.set()
    thread.join(HANG_GUARD)
    assert not thread.is_alive()
    assert [type(e) for e in raised] == [ReadStopped]
    assert reader.process.exitcode == -signal.SIGKILL
    assert workers.readers == []


def test_a_real_ods_whose_one_cell_repeats_a_billion_times_is_refused_without_harm(
    tmp_path: Path,
) -> None:
    ods = tmp_path / "bomb.ods"
    write_repeating_ods(ods)
    assert ods.stat().st_size < 1000
    (tmp_path / "ok.txt").write_text(TEXT["a.txt"])
    workers = ReadWorkers(BUDGET)
    tasks = [(tmp_path / n, tmp_path, None, OPTIONS, source_of) for n in ("bomb.ods", "ok.txt")]
    try:
        (_, refused, _), (_, doc, _) = list(workers.map(tasks))
    finally:
        workers.close()
    assert isinstance(refused, SourceError)  # over the budget (or refused before it expands)
    assert "bomb.ods" in str(refused)
    assert isinstance(doc, Document)


def write_repeating_ods(path: Path) -> None:
    """A spreadsheet whose one empty cell repeats 1,000,000,000 times (issue 57, case 2)."""
    content = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
        ' xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
        ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2">'
        '<office:body><office:spreadsheet><table:table table:name="S"><table:table-row>'
        '<table:table-cell table:number-columns-repeated="1000000000"/>'
        "<table:table-cell><text:p>x</text:p></table:table-cell>"
        "</table:table-row></table:table></office:spreadsheet></office:body>"
        "</office:document-content>"
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet", zipfile.ZIP_STORED)
        z.writestr("content.xml", content)


def wait_for_file(path: Path) -> None:
    wait_until(path.exists, timeout=HANG_GUARD, what=f"{path} written by a reader")


def test_a_slow_consumer_is_not_counted_as_reading_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """More readers start when *reading* has taken PARALLEL_READ_SECONDS, not when the consumer
    (the build's embedding) held the results that long: before, the time between a reader's
    start and the parent's next look at it was counted, and a daemon batch of small files whose
    embedding took seconds logged 'read for 53.7 s' and started reader processes for nothing."""
    names = [f"f{i}.txt" for i in range(6)]
    for name in names:
        (tmp_path / name).write_text(TEXT["a.txt"])
    workers = ReadWorkers(BUDGET)
    tasks = [(tmp_path / name, tmp_path, None, OPTIONS, reader_pid) for name in names]
    caplog.set_level(logging.INFO, logger="ingestor.pipeline.readers")
    try:
        for _ in workers.map(tasks, workers=2):
            time.sleep(PARALLEL_READ_SECONDS / 3)  # the consumer: 2x the threshold in all
    finally:
        workers.close()
    assert "reader processes read the rest" not in caplog.text, "reading took milliseconds"
