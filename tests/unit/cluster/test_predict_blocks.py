"""A layer's global mixture labels every node a block of rows at a time."""

from __future__ import annotations

import tracemalloc

import numpy as np

from ingestor.cluster import gmm as mixtures
from ingestor.cluster.gmm import GaussianParams, predict_blocks, to_sklearn


def test_blocked_labels_are_scikit_learns_and_hold_one_block_of_log_probabilities() -> None:
    rng = np.random.default_rng(0)
    k, dim, n = 60, 4, 120_000
    means = rng.normal(size=(k, dim)) * 5
    covs = np.stack([np.eye(dim)] * k)
    gmm = to_sklearn(GaussianParams(np.full(k, 1 / k), means, covs))
    Y = (means[rng.integers(k, size=n)] + rng.normal(size=(n, dim))).astype(np.float32)
    whole = n * k * 8  # scikit-learn's (n, k) float64 log-probabilities, one of them
    tracemalloc.start()
    try:
        labels = predict_blocks(gmm, Y)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        expected = gmm.predict(Y)
        _, unblocked = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(labels, expected)
    assert labels.dtype == np.intp
    assert unblocked > whole  # what the blocks avoid
    assert peak < whole // 2, f"{peak / whole:.2f} x one (n, k) array"
    assert n // 4 > mixtures.PREDICT_BLOCK
    assert len(predict_blocks(gmm, Y[:0])) == 0
