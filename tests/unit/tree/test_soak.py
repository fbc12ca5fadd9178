"""A short long-life soak (bench/soak.py at ~200 operations): the real clusterer and qdrant-edge,
hashed embeddings and echo summaries, every invariant checked after every batch."""

from __future__ import annotations

import random
from pathlib import Path

from testkit.fakes import EchoSummarizer, HashEmbedder
from testkit.soak import compare_with_rebuild, group_agreement
from testkit.soak_ops import Corpus, Soak, check, make_pipeline


def test_a_short_soak_keeps_every_invariant_after_every_batch(tmp_path: Path) -> None:
    rng = random.Random(0)
    root = tmp_path / "folder"
    p = make_pipeline(
        tmp_path / "state", HashEmbedder(dim=48), EchoSummarizer(), chunk_tokens=60, n_epochs=50
    )
    try:
        corpus = Corpus(rng)
        soak = Soak(p, root, corpus, rng)
        soak.seed_folder(30)
        p.build(root)
        check(p, root)
        stats = soak.run(200, max_batch=15)
        assert sum(stats.ops.values()) == 200
        assert set(stats.ops) == {"add", "edit", "remove", "rename", "add_dir", "remove_dir"}
        assert stats.batches >= 15
        assert stats.checks == 4 * stats.batches
        cmp = compare_with_rebuild(
            p, root, tmp_path / "rebuild", corpus, EchoSummarizer(), 100, rng
        )
        assert cmp.largest <= 2 * cmp.largest_rebuild, (cmp.sizes, cmp.sizes_rebuild)
        assert cmp.groups is not None  # where the two trees part: groups, clusters within
        assert all(-1.0 <= x <= 1.0 for x in cmp.groups)
        state = p.require_state()
        assert group_agreement(state, state) == (1.0, 1.0)
    finally:
        p.context.store.close()
