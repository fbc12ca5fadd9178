"""A build on two workers is the serial build, node for node and point for point.

The same folder is built by a whole pipeline (real qdrant-edge store, hashed embeddings,
extractive summaries) with one worker and with two, the parallel build's reading, local steps and
summaries forced onto its workers; the digests of every node (id, layer, text, vector rounded,
parents, children, sources) and of every stored point (payload without its write time, vector
rounded) are equal.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingestor.cluster import bic_search, parallel
from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline, collect, context, overlap
from ingestor.summarize import extractive
from ingestor.summarize.extractive import ExtractiveSummarizer
from ingestor.tree.build import TreeBuilder, TreeParams
from models_store import ModelStore
from retriever.edge_store import EdgeNodeStore
from retriever.schema import F
from testkit.fakes import HashEmbedder
from tests.unit.tree.test_adrap import write_corpus


def _pipeline(state_dir: Path, workers: int) -> Pipeline:
    emb = HashEmbedder(dim=16)

    def make() -> TreeClusterer:
        return TreeClusterer(random_state=0, n_epochs=30, max_group=60, workers=workers)

    return Pipeline(
        tree="t",
        embedder=emb,
        builder=TreeBuilder(
            emb,
            ExtractiveSummarizer(),
            make,
            TreeParams(summary_max_tokens=40, min_top_nodes=4),
            workers=workers,
        ),
        store=EdgeNodeStore(state_dir / "qdrant"),
        models=ModelStore(state_dir / "models"),
        chunk_tokens=40,
        chunk_overlap=8,
    )


def _rounded(vector: Any) -> list[float]:
    return [round(float(x), 5) for x in np.asarray(vector, dtype=np.float32)]


def _digest(items: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


def _build(root: Path, state_dir: Path, workers: int) -> tuple[str, str, int, dict[int, int]]:
    """Build ``root``; return the digests of its nodes and of its stored points, the point
    count and the nodes per layer."""
    p = _pipeline(state_dir, workers)
    try:
        p.build(root)
        state = p.require_state()
        ids = sorted(state.nodes.keys())
        matrix = state.matrix(ids)
        nodes = {
            i: [
                n.layer,
                n.text,
                _rounded(v),
                sorted(n.parents),
                list(n.children),
                sorted(n.sources),
                n.content_hash,
            ]
            for i, v in zip(ids, matrix, strict=True)
            for n in [state.nodes[i]]
        }
        stored = sorted(p.context.store.iter_ids("t"))
        vectors = p.context.store.retrieve_vectors(stored)
        points = {}
        for payload, vec in zip(p.context.store.retrieve(stored), vectors, strict=True):
            fields = payload.model_dump(mode="json")
            fields.pop(F.UPDATED_AT)  # when it was written
            points[payload.node_id] = [fields, _rounded(vec)]
        return _digest(nodes), _digest(points), len(points), state.layer_counts()
    finally:
        p.context.store.close()


def test_a_build_on_two_workers_is_the_serial_build_node_for_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parallel, "MIN_PARALLEL_ROWS", 0)  # small layers go to the workers too
    monkeypatch.setattr(parallel, "BLOCK_ROWS", 64)  # and their transforms come in blocks
    monkeypatch.setattr(collect, "PARALLEL_READ_SECONDS", 0.0)  # the first file, then workers
    monkeypatch.setattr(collect, "FILES_PER_TASK", 2)
    monkeypatch.setattr(extractive, "GROUPS_PER_TASK", 4)
    monkeypatch.setattr(context, "UPSERT_BATCH", 16)  # the store filled in many batches
    monkeypatch.setattr(overlap, "DEPTH", 1)  # and one ahead: the queue full most of the time
    root = tmp_path / "docs"
    write_corpus(root, random.Random(5), 40)
    serial = _build(root, tmp_path / "one", 1)
    started: list[int] = []
    start = parallel.WorkerPool._start

    def spy(pool: parallel.WorkerPool) -> Any:
        started.append(pool.workers)
        return start(pool)

    monkeypatch.setattr(parallel.WorkerPool, "_start", spy)
    built = _build(root, tmp_path / "two", 2)
    assert set(started) == {2}  # two workers read, cluster and summarise
    _, _, count, layers = serial
    assert len(layers) >= 3, layers  # leaves and two summary layers at least
    assert count == sum(layers.values())
    assert built == serial


def test_the_global_steps_bic_fits_run_on_the_workers_and_choose_the_same_mixture() -> None:
    """The coarse grid and each round's probes go to the workers at once (largest k first); the
    fits, their BIC values and the chosen mixture are those of the search in this process."""
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(6, 4)) * 6
    Y = np.concatenate([c + rng.normal(size=(60, 4)) for c in centres])
    here = bic_search._BicSearch(Y, random_state=0, max_iter=100)
    bic_search._coarse_to_fine(here.bic, 40)
    batches: list[list[int]] = []
    with parallel.worker_pool(2) as pool:

        def mapper(fn: Any, tasks: list[Any]) -> list[Any]:
            batches.append([k for _, k, _, _ in tasks])
            return pool.map(fn, tasks, count=len(tasks), rows=10**6, what=str)

        there = bic_search._BicSearch(Y, random_state=0, max_iter=100, mapper=mapper)
        bic_search._coarse_to_fine(there.bic, 40, prefetch=there.prefetch)
        assert pool.started
    assert batches[0] == sorted(bic_search._grid(40), reverse=True)
    assert there.fits.keys() == here.fits.keys()
    assert {k: b for k, (b, _) in there.fits.items()} == {k: b for k, (b, _) in here.fits.items()}
    a, b = here.best(), there.best()
    assert a.n_components == b.n_components
    assert np.array_equal(a.means_, b.means_)
