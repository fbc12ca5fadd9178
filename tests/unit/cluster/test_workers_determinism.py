"""Build workers: the same clustering, summaries, leaves and tree, with one and with two workers.

The tests share one pool of two spawned workers (module fixture), and lower the size at which a
pool starts, so small inputs run in the workers.
"""

from __future__ import annotations

import os
import pickle
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from ingestor.cluster import parallel, two_step
from ingestor.cluster.fit_steps import fit_group
from ingestor.cluster.parallel import WorkerPool, shared_pools, transform_in_blocks, worker_pool
from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import collect
from ingestor.pipeline.chunker import Chunker
from ingestor.pipeline.collect import Collector
from ingestor.pipeline.reports import BuildReport
from ingestor.read.documents import Document
from ingestor.read.tokens import default_tokenizer
from ingestor.summarize import extractive
from ingestor.summarize.extractive import ExtractiveSummarizer
from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.params import no_progress
from ingestor.tree.state import TreeState
from tests.unit.cluster.test_two_step import sphere_blobs
from tests.unit.read.test_formats import make_docx, make_pptx, make_xlsx
from tests.unit.tree.trees import EMBEDDER, make_builder, new_state


@pytest.fixture(scope="module")
def two_workers() -> Iterator[WorkerPool]:
    """A started pool of two workers, which every fit of the module with workers=2 uses."""
    with pytest.MonkeyPatch.context() as mp, shared_pools():
        mp.setattr(parallel, "MIN_PARALLEL_ROWS", 0)  # small inputs go to the workers too
        mp.setattr(parallel, "BLOCK_ROWS", 128)  # and their transforms come in several blocks
        with worker_pool(2) as pool:
            yield pool


def fit(X: NDArray[np.float32], workers: int) -> TreeClusterer:
    return TreeClusterer(
        random_state=0, fit_sample=200, max_group=90, n_epochs=50, workers=workers
    ).fit(X)


def test_a_fit_is_the_same_with_one_and_two_workers(two_workers: WorkerPool) -> None:
    """Global labels, final clusters, local embeddings and models: equal, with 5 groups or more
    whose local steps ran in the workers, and 220 points transformed in 2 blocks there."""
    X, _ = sphere_blobs(n_blobs=6, per_blob=70, dim=16, spread=0.3, seed=1)
    one, two = fit(X, 1), fit(X, 2)
    assert two_workers.started
    assert len(one.local_models_) >= 5
    assert np.array_equal(one.global_labels_, two.global_labels_)
    assert one.clusters_ == two.clusters_
    for a, b in zip(one.local_models_, two.local_models_, strict=True):
        assert np.array_equal(a.members, b.members)
        assert a.cluster_ids == b.cluster_ids
        assert (a.embedding is None) == (b.embedding is None)
        if a.embedding is not None and b.embedding is not None:
            assert np.array_equal(a.embedding, b.embedding)
    new = X[:40] + 0.01
    assert one.predict(new) == two.predict(new)  # the models that came back from the workers
    g = next(g for g, m in enumerate(two.local_models_) if m.umap is not None)
    assert np.array_equal(one.transform_local(g, new), two.transform_local(g, new))
    stored = pickle.loads(pickle.dumps(two))  # as the state database stores it
    assert stored.predict(new) == one.predict(new)


def test_refit_local_umaps_are_the_same_on_the_workers(two_workers: WorkerPool) -> None:
    """A model change's (or an upgrade's) local UMAPs, fitted on the workers a few groups ahead
    (``reduce_locals``), are those fitted one at a time in this process (``reduce_local``)."""
    X, labels = sphere_blobs(n_blobs=4, per_blob=70, dim=16, spread=0.3, seed=2)
    groups = [X[labels == b] for b in range(4)]

    def clusterer(workers: int) -> TreeClusterer:
        return TreeClusterer(random_state=0, fit_sample=50, n_epochs=50, workers=workers)

    serial = [clusterer(1).reduce_local(G) for G in groups]
    parallel_fits = list(clusterer(2).reduce_locals(iter(groups), count=4, rows=len(X)))
    assert two_workers.started
    assert len(parallel_fits) == 4
    for G, (umap_a, y_a), (umap_b, y_b) in zip(groups, serial, parallel_fits, strict=True):
        assert np.array_equal(y_a, y_b)
        assert np.array_equal(umap_a.transform(G[:5]), umap_b.transform(G[:5]))


def test_blocked_transform_is_the_same_for_any_worker_count(two_workers: WorkerPool) -> None:
    """Each block is transformed on its own: the result depends on the block size only."""
    X, _ = sphere_blobs(n_blobs=4, per_blob=100, dim=16, spread=0.3, seed=2)
    reducer = TreeClusterer(random_state=0, n_epochs=50).fit(X[:100]).global_umap_
    rows = np.arange(100, 400)

    def blocked(pool: WorkerPool) -> NDArray[np.float32]:
        return transform_in_blocks(pool, reducer, X, rows, what="test", serial=True)

    here = blocked(WorkerPool(1))
    assert np.array_equal(here, blocked(two_workers))
    first = transform_in_blocks(WorkerPool(1), reducer, X, rows[:128], what="test", serial=True)
    assert np.array_equal(here[:128], first)  # a block does not see the others


def build(workers: int, texts: list[str]) -> TreeState:
    state, _ = new_state(texts)
    make_builder(
        lambda: TreeClusterer(random_state=0, n_epochs=50, max_group=120, workers=workers),
        min_top_nodes=4,
    ).build(state)
    return state


def test_a_build_is_the_same_tree_node_for_node_with_one_and_two_workers(
    two_workers: WorkerPool,
) -> None:
    texts = [f"topic {i % 7} note {i} on subject {i % 11} and item {i % 5}" for i in range(400)]
    one, two = build(1, texts), build(2, texts)
    assert two_workers.started
    assert len(one.layers) >= 1
    assert one.nodes.keys() == two.nodes.keys()
    for node_id, a in one.nodes.items():
        b = two.nodes[node_id]
        assert (a.layer, a.text, sorted(a.parents)) == (b.layer, b.text, sorted(b.parents))


def test_an_error_in_the_local_step_names_the_global_cluster(two_workers: WorkerPool) -> None:
    """In a worker and in this process alike: the task's own exception, and a note naming the
    global cluster and its size (max_cluster_size=0 divides by zero in the local step only)."""
    X, _ = sphere_blobs(n_blobs=3, per_blob=100, dim=16, spread=0.3, seed=3)
    for workers in (2, 1):
        clusterer = TreeClusterer(random_state=0, max_group=120, n_epochs=50, max_cluster_size=0)
        clusterer.workers = workers
        with pytest.raises(ZeroDivisionError) as caught:
            clusterer.fit(X)
        note = " ".join(getattr(caught.value, "__notes__", []))
        found = re.search(r"local step of global cluster (\d+) \((\d+) points\)", note)
        assert found, note
        g, m = map(int, found.groups())
        assert m == np.count_nonzero(clusterer.global_labels_ == g)
        assert ("worker process" in note) == (workers == 2)


def test_extractive_summaries_are_made_on_the_workers_and_the_tree_is_the_same(
    two_workers: WorkerPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A builder with two workers hands its extractive summariser the workers (every group of
    a layer, in tasks of GROUPS_PER_TASK); its summaries and tree are those of one worker."""
    monkeypatch.setattr(extractive, "GROUPS_PER_TASK", 4)  # several tasks for a small layer
    ran: list[object] = []
    map_in_workers = two_workers.map

    def spy(fn: Any, tasks: Any, **kwargs: Any) -> Any:
        ran.append(fn)
        return map_in_workers(fn, tasks, **kwargs)

    monkeypatch.setattr(two_workers, "map", spy)
    texts = [
        f"Topic {i % 7} is about subject {i % 11}. Item {i % 5} was noted on day {i}. "
        f"The note number {i} ends here."
        for i in range(300)
    ]
    trees = []
    for workers in (1, 2):
        state, _ = new_state(texts)
        TreeBuilder(
            EMBEDDER,
            ExtractiveSummarizer(),
            lambda: TreeClusterer(random_state=0, n_epochs=50, max_group=120, workers=1),
            TreeParams(summary_max_tokens=40, min_top_nodes=4),
            workers=workers,
        ).build(state)
        trees.append(state)
    one, two = trees
    assert extractive._summarize_part in ran  # the summaries of the two-worker build
    assert len(one.layers) >= 1
    assert one.nodes.keys() == two.nodes.keys()
    for node_id, a in one.nodes.items():
        assert a.text == two.nodes[node_id].text


def _pid(doc: Document) -> int:
    return os.getpid()


def test_a_folder_is_read_and_chunked_the_same_on_the_workers(
    two_workers: WorkerPool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Documents, leaves, skips and the ledger: those of a read in this process, in listing
    order; the files were read in the workers once reading here took PARALLEL_READ_SECONDS."""
    monkeypatch.setattr(collect, "PARALLEL_READ_SECONDS", 0.0)  # the first file, then workers
    monkeypatch.setattr(collect, "FILES_PER_TASK", 3)
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    for i in range(30):
        words = " ".join(f"word{(i * 7 + j) % 97}" for j in range(40 + 13 * i))
        (root / ("sub" if i % 3 else "") / f"f{i:02d}.md").write_text(f"# Note {i}\n\n{words}.\n")
    (root / "empty.txt").write_text("")
    (root / "binary.txt").write_bytes(b"\x00\x01\x02" * 100)
    (root / "report.docx").write_bytes(make_docx())  # Office files: their converters in a worker
    (root / "budget.xlsx").write_bytes(make_xlsx())
    (root / "sub" / "deck.pptx").write_bytes(make_pptx())
    for path in root.rglob("*"):  # an hour old: no read is racily clean (mtime_ns 0), both alike
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    chunker = Chunker("t", chunk_tokens=30, chunk_overlap=5, tokenizer=default_tokenizer())

    def read(pool: WorkerPool | None) -> tuple[list[Any], list[Any]]:
        report = BuildReport()
        out = [
            (doc, [replace(leaf, updated_at=0.0) for leaf in leaves])  # when it was made
            for doc, leaves in Collector().iter_all(root, report, no_progress, chunker, pool)
        ]
        return out, report.skipped

    here, skipped_here = read(None)
    there, skipped_there = read(two_workers)
    assert len(here) == 33
    assert {doc.source for doc, _ in here} >= {"report.docx", "budget.xlsx", "sub/deck.pptx"}
    assert len(skipped_here) == 2
    assert there == here
    assert skipped_there == skipped_here
    assert [doc.source for doc, _ in here] == sorted(doc.source for doc, _ in here)
    pids = [
        pid for _, pid in Collector().iter_all(root, BuildReport(), no_progress, _pid, two_workers)
    ]
    assert len(pids) == 33
    assert os.getpid() not in pids[1:]  # the first file was read here, the rest in the workers
    monkeypatch.setattr(collect, "PARALLEL_READ_SECONDS", 60.0)  # quick to read: here
    pids = {
        pid
        for _, pid in Collector().iter_all(root, BuildReport(), no_progress, _pid, WorkerPool(2))
    }
    assert pids == {os.getpid()}


def _uneven_groups() -> NDArray[np.float32]:
    X, labels = sphere_blobs(n_blobs=6, per_blob=80, dim=16, spread=0.3, seed=1)
    keep = np.concatenate([np.flatnonzero(labels == b)[: 25 + 11 * (b * 5 % 6)] for b in range(6)])
    return X[np.sort(keep)]


def _spy_on_local_steps(pool: WorkerPool, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of each local step handed to ``pool``, in the order handed."""
    sizes: list[int] = []
    stream = pool.stream

    def spy(fn: Any, tasks: Any, **kwargs: Any) -> Any:
        if fn is not fit_group:
            return stream(fn, tasks, **kwargs)
        tasks = list(tasks)
        sizes.extend(len(rows) for _, rows, _ in tasks)
        return stream(fn, tasks, **kwargs)

    monkeypatch.setattr(pool, "stream", spy)
    return sizes


class _Sink(list[Any]):
    """Local models as appended, with how many local steps had finished at each append."""

    def __init__(self, finished: list[int]) -> None:
        super().__init__()
        self.finished = finished
        self.seen: list[int] = []

    def append(self, item: Any) -> None:
        self.seen.append(self.finished[0])
        super().append(item)


def test_unbounded_groups_go_to_the_workers_largest_first(
    two_workers: WorkerPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker is left with a large group at the end while the others wait; the clusters
    are still numbered in group order (the fit is the one-worker fit, as above)."""
    sizes = _spy_on_local_steps(two_workers, monkeypatch)
    two = TreeClusterer(random_state=0, fit_sample=200, max_group=None, n_epochs=50, workers=2).fit(
        _uneven_groups()
    )
    assert len(sizes) == len(two.local_models_) >= 5
    in_group_order = [len(m.members) for m in two.local_models_]
    assert sizes == sorted(in_group_order, reverse=True)
    assert sizes != in_group_order


def test_bounded_groups_are_placed_one_by_one_as_their_local_steps_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bounded groups (the default) go in group order, and each local model reaches the
    clusterer's sink once its own step is done, not once every step is: a first build writes
    each to disk as it comes and holds none (see ingestor.tree.model_rows)."""
    X = _uneven_groups()
    one = fit(X, 1)
    finished = [0]

    def counted(task: Any) -> Any:  # in this process: one worker
        finished[0] += 1
        return fit_group(task)

    monkeypatch.setattr(two_step, "fit_group", counted)
    sink = _Sink(finished)
    clusterer = TreeClusterer(random_state=0, fit_sample=200, max_group=90, n_epochs=50)
    clusterer.fit(X, local_models=sink)
    assert clusterer.local_models_ is sink
    assert len(sink) == len(one.local_models_) >= 5
    assert sink.seen == list(range(1, len(sink) + 1))  # each placed right after its step
    assert clusterer.clusters_ == one.clusters_
