"""A fitted layer is wrapped without a map of every row to its clusters."""

from __future__ import annotations

import tracemalloc

import numpy as np

from ingestor.cluster.adaptive import AdaptiveLayer
from ingestor.cluster.two_step import TreeClusterer


def test_from_fit_reads_each_groups_memberships_from_its_own_clusters() -> None:
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(40, 24))
    X = (centres[rng.integers(40, size=6000)] + 2.0 * rng.normal(size=(6000, 24))).astype(
        np.float32
    )
    clusterer = TreeClusterer(random_state=0, max_group=600, n_epochs=20).fit(X)
    ids = [f"n{i}" for i in range(len(X))]
    nodes = {fid: [f"s{fid}"] for fid in range(clusterer.n_clusters_)}
    tracemalloc.start()
    try:
        layer = AdaptiveLayer.from_fit(0, clusterer, ids, nodes)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What the layer keeps (point maps, each point's memberships) is the floor; a map of every
    # row to its clusters, built and dropped, was ~0.5x more than it at its peak.
    assert peak - kept < 0.2 * kept, f"transient {(peak - kept) / kept:.2f} x what is kept"
    for fid, rows in enumerate(clusterer.clusters_):  # memberships as the clusters say
        assert sorted(layer.members(fid)) == sorted(ids[r] for r in rows)
    soft = sum(len(rows) for rows in clusterer.clusters_)
    assert soft > len(X)  # some rows are in two clusters: memberships are sets, not labels
