"""A copied file adds no text to summarise: each summary reads its children's distinct texts, and
the summary cache is keyed by them, so a cluster that gained only copies of what it held is the
summary it was (a share's ``report (1).docx``, a folder copied as a backup).

Real TreeClusterer, qdrant-edge and state database; hashed embeddings and echo summaries.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from ingestor.tree.invariants import violations
from ingestor.tree.summaries import cache_key
from testkit.fakes import EchoSummarizer
from tests.unit.pipeline.test_moves import _built, _store_matches_state


class RecordingSummarizer(EchoSummarizer):
    """Echo summaries, keeping every group of texts it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[list[str]] = []

    def summarize_many(self, groups: Sequence[Sequence[str]], **kwargs):  # type: ignore[no-untyped-def,override]
        self.groups.extend(list(g) for g in groups)
        return super().summarize_many(groups, **kwargs)


def test_the_cache_key_is_the_childrens_distinct_texts() -> None:
    summ = EchoSummarizer()
    assert cache_key(summ, 40, ["a", "a", "b"]) == cache_key(summ, 40, ["b", "a"])
    assert cache_key(summ, 40, ["a", "b"]) != cache_key(summ, 40, ["a", "c"])


def test_a_copied_folder_is_summarised_from_distinct_texts_and_hits_the_cache(
    tmp_path: Path,
) -> None:
    p, _summ, root = _built(tmp_path)
    recorder = RecordingSummarizer()
    p.context.builder.summaries.summarizer = recorder
    shutil.copytree(root / "old", root / "copy")

    report = p.reconcile(root)

    assert report.files_added == 12
    assert all(len(g) == len(set(g)) for g in recorder.groups), "a summary read a text twice"
    assert report.stats.summary_cache_hits > 0, "clusters that gained only copies paid again"
    state = p.require_state()
    assert violations(state) == []
    _store_matches_state(p)
