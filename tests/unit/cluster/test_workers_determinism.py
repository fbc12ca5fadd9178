"""Build workers: the same clustering and tree, node for node, with one and with two workers.

The tests share one pool of two spawned workers (module fixture), and lower the size at which a
pool starts, so small inputs run in the workers.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator

import numpy as np
import pytest
from numpy.typing import NDArray

from ingestor.cluster import parallel
from ingestor.cluster.parallel import WorkerPool, shared_pools, transform_in_blocks, worker_pool
from ingestor.cluster.two_step import TreeClusterer
from ingestor.tree.state import TreeState
from tests.unit.cluster.test_two_step import sphere_blobs
from tests.unit.tree.trees import make_builder, new_state


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
