"""A change of summariser (``ADRAP_SUMMARY__BACKEND`` or its model): the tree's summaries stay
as they were written until ``adrap refresh --rewrite`` writes every one the other summariser
wrote again, in one update; the settings' summariser writes those regenerated meanwhile."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from ingestor.tree.invariants import violations
from ingestor.tree.params import TreeParams
from ingestor.tree.state import SUMMARIZER_PARAM, SUMMARY_FORM_PARAM
from testkit.corpus import doc_text, make_pipeline
from testkit.fakes import EchoSummarizer, QuotingSummarizer


class Quoting(QuotingSummarizer):
    id = "quoting"


def _share(tmp_path: Path) -> Path:
    rng = random.Random(11)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(12):
        (root / f"d{i}.txt").write_text(doc_text(rng, 10))
    return root


def _writers(p) -> set[str | None]:  # type: ignore[no-untyped-def]
    return {n.summarizer for n in p.require_state().nodes.values() if n.layer > 0}


def test_refresh_rewrite_writes_every_summary_another_summariser_wrote(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _share(tmp_path)
    built = make_pipeline(tmp_path, EchoSummarizer())
    built.build(root)
    assert _writers(built) == {"echo"}
    assert built.require_state().params[SUMMARIZER_PARAM] == "echo"
    built.context.store.close()

    quoting = Quoting()
    p = make_pipeline(tmp_path, quoting)
    with caplog.at_level(logging.WARNING):
        assert p.refresh().stats.summaries_regenerated == 0, "a plain refresh rewrites nothing"
    assert "written by 'echo'" in caplog.text
    assert "--rewrite" in caplog.text
    assert _writers(p) == {"echo"}

    report = p.refresh(rewrite=True)
    state = p.require_state()
    assert _writers(p) == {"quoting"}
    assert report.stats.summaries_regenerated >= len(state.ids_in_layer(1))
    assert state.params[SUMMARIZER_PARAM] == "quoting"
    assert not len(state.stale)
    assert violations(state) == []
    stored = p.context.store.retrieve([i for i, n in state.nodes.items() if n.layer > 0])
    assert {n.summarizer for n in stored} == {"quoting"}, "the points carry the new texts"
    calls = quoting.calls
    assert p.refresh(rewrite=True).stats.summaries_regenerated == 0, "done once"
    assert quoting.calls == calls
    p.context.store.close()


def test_refresh_rewrite_writes_every_summary_again_when_their_length_changed(
    tmp_path: Path,
) -> None:
    """The same summariser, another ``ADRAP_SUMMARY__MAX_TOKENS``: every summary is of the old
    length, whoever wrote it, so every one is written again (the echo summariser's length is
    in words)."""
    root = _share(tmp_path)
    built = make_pipeline(tmp_path, EchoSummarizer(), params=TreeParams(summary_max_tokens=40))
    built.build(root)
    assert built.require_state().params[SUMMARY_FORM_PARAM].endswith(", 40 tokens")
    built.context.store.close()
    summarizer = EchoSummarizer()
    p = make_pipeline(tmp_path, summarizer, params=TreeParams(summary_max_tokens=24))
    before = [len(n.text.split()) for n in p.require_state().nodes.values() if n.layer > 0]
    assert max(before) > 24, "the test needs summaries longer than the new length"
    p.refresh(rewrite=True)
    assert summarizer.calls > 0
    assert p.require_state().params[SUMMARY_FORM_PARAM].endswith(", 24 tokens")
    assert all(
        len(n.text.split()) <= 24 for n in p.require_state().nodes.values() if n.layer > 0
    ), "written again at the new length"
    p.context.store.close()
