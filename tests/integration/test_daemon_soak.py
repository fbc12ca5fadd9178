"""The daemon side of the long-life soak (bench/soak.py --daemon), short: a running `adrap watch`
with the packaged model, driven through random batches of file operations, every tree invariant
checked on the committed state after each batch, store == state after SIGTERM."""

from __future__ import annotations

import pytest

from bench.soak import daemon_soak


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ImportWarning")  # umap's optional parametric (TensorFlow) part
def test_a_short_daemon_soak_keeps_every_invariant() -> None:
    assert daemon_soak(n_ops=25, max_batch=6, seed=1, n_docs=15) == 0
