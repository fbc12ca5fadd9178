"""The bench soak's own sequences, as far as each once broke an invariant (slow: ~20 s each).

``bench/soak.py --seed 1`` left three leaves without a parent in batch 14 (a regenerated
summary took over the node of an unchanged cluster; tests/unit/tree/test_summary_ids.py is the
mechanism's unit test). The soak's defaults: 150 documents, batches of 1-50 operations, hashed
384-d embeddings, extractive summaries, every invariant checked after every batch."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ingestor.summarize.extractive import ExtractiveSummarizer
from testkit.fakes import HashEmbedder
from testkit.soak_ops import Corpus, Soak, check, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize(("seed", "ops"), [(1, 400)])
def test_a_bench_soak_sequence_keeps_every_invariant(tmp_path: Path, seed: int, ops: int) -> None:
    rng = random.Random(seed)
    root = tmp_path / "folder"
    p = make_pipeline(tmp_path / "state", HashEmbedder(dim=384), ExtractiveSummarizer())
    try:
        soak = Soak(p, root, Corpus(rng), rng)
        soak.seed_folder(150)
        p.build(root)
        check(p, root)
        stats = soak.run(ops)  # check() after every batch raises on the first broken invariant
        assert stats.checks == 4 * stats.batches
    finally:
        p.context.store.close()
