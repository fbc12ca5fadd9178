"""The packaged embedding model in a long-running process (as writers run it): memory stays flat."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from retriever.torch_bert import TorchBertEmbedder

pytestmark = pytest.mark.integration

WORDS = ["the", "river", "flows", "past", "old", "stone", "mills", "toward", "a", "quiet", "town"]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_embedding_batches_of_changing_shapes_do_not_grow_the_process() -> None:
    """Each batch's texts x tokens differ, as a daemon's updates do. Without handing freed heap
    back to the OS, 30 such batches (of up to 16 texts) grew the process by 157 MiB; with it, 1 MiB."""
    embedder = TorchBertEmbedder()
    words = WORDS * 40
    rng = random.Random(0)

    def batch() -> list[str]:
        return [" ".join(rng.sample(words, rng.randint(5, 250))) for _ in range(rng.randint(1, 16))]

    for _ in range(3):
        embedder.embed_documents(batch())
    before = rss_mib()
    for _ in range(30):
        embedder.embed_documents(batch())
    grew = rss_mib() - before
    assert grew < 120, f"30 embedding batches grew the process by {grew:.0f} MiB"
