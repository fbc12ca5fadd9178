"""Builds and adRAP's updates run BLAS on one thread (ingestor/cluster/threads.py): its matrices are tiny and a
second OpenBLAS thread only spins, burning a core the update does not use."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from threadpoolctl import threadpool_info, threadpool_limits

from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline, write_corpus


def blas_threads() -> set[int]:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


def openmp_threads() -> set[int]:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"}


class ThreadWatchingSummarizer(EchoSummarizer):
    """Records the BLAS thread count while adRAP calls it (inside the update)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[set[int]] = []
        self.seen_omp: list[set[int]] = []

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        self.seen.append(blas_threads())
        self.seen_omp.append(openmp_threads())
        return super().summarize_many(groups, max_tokens=max_tokens, query=query)


def test_a_build_and_an_update_run_blas_on_one_thread_and_restore_it(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    rng = random.Random(5)
    write_corpus(root, rng, 24)
    s = ThreadWatchingSummarizer()
    p = make_pipeline(tmp_path, s)
    with threadpool_limits(limits=2):
        p.build(root)
    assert s.seen
    assert all(seen == {1} for seen in s.seen), s.seen
    new = root / "new.txt"
    new.write_text(doc_text(rng, 8))
    with threadpool_limits(limits=2):  # what a 2-core machine starts with
        s.seen.clear()
        s.seen_omp.clear()
        p.update([new])
        assert blas_threads() == {2}, "the limit ends with the update"
    assert s.seen, "the update regenerated summaries"
    assert all(seen == {1} for seen in s.seen), s.seen
    # Only BLAS: the embedding model's OpenMP pool (torch) keeps its threads.
    assert all(seen <= {2} and 2 in seen for seen in s.seen_omp if seen), s.seen_omp
    check_invariants(p)
