"""The daemon side of the long-life soak (bench/soak.py --daemon), short: a running `adrap watch`
with the packaged model, driven through random batches of file operations; after each batch every
tree invariant of the committed state, and the daemon's store read through its Qdrant REST facade
with qdrant-client (ids, parents, children == the state's); store == state after SIGTERM; then the
comparison with `adrap build` of the final folder."""

from __future__ import annotations

import pytest

from testkit.soak import daemon_soak


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ImportWarning")  # umap's optional parametric (TensorFlow) part
def test_a_short_daemon_soak_keeps_every_invariant() -> None:
    assert daemon_soak(n_ops=25, max_batch=6, seed=1, n_docs=15, questions=40) == 0
