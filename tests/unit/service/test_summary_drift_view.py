"""Per-summary drift at the dashboard (issue 55): a summary kept within tolerance after its
children changed shows how many of its children's tokens changed since its text was written,
read from its one row of the committed state; a fresh summary shows 0, a leaf nothing."""

from __future__ import annotations

import random
from pathlib import Path

from ingestor.service.dashboard.view import TreeView
from ingestor.tree.build import TreeParams
from ingestor.tree.drift import summary_drift
from ingestor.tree.persist import state_file
from models_store import RowStore
from testkit.corpus import doc_text, make_pipeline
from tests.unit.service.test_watcher import write_corpus


def test_a_summary_kept_within_tolerance_shows_its_drift(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 8)
    rng = random.Random(1)
    p = make_pipeline(tmp_path, params=TreeParams(summary_max_tokens=40, min_change=0.9))
    p.build(root)
    try:
        rows = RowStore(state_file(tmp_path / "state" / "models", "t"), readonly=True)
        view = TreeView(
            p.context.store, "t", drift=lambda i: summary_drift(rows, i), regenerate_at=0.9
        )
        state = p.require_state()
        summaries = [n for n in state.nodes.values() if n.layer == 1]
        fresh = view.node(summaries[0].node_id)
        assert fresh is not None
        assert fresh["drift"]["tokens"] == 0
        assert fresh["drift"]["children_tokens"] == sum(
            state.nodes[c].n_tokens for c in summaries[0].children
        )
        assert fresh["drift"]["regenerate_at"] == 0.9
        leaf = next(n for n in state.nodes.values() if n.layer == 0)
        assert "drift" not in (view.node(leaf.node_id) or {})

        doc = root / "d0.txt"  # one sentence more: its summaries are kept, their drift grows
        doc.write_text(doc.read_text() + " " + doc_text(rng, 1))
        report = p.update([doc])
        assert report.stats.summaries_tolerated > 0, report
        drifted = [
            out["drift"]
            for n in p.require_state().nodes.values()
            if n.layer > 0 and (out := view.node(n.node_id)) is not None
        ]
        moved = [d for d in drifted if d["tokens"] > 0]
        assert moved, drifted
        for d in moved:
            assert d["share"] == round(d["tokens"] / d["children_tokens"], 3)
            assert d["removed"] is False
        assert summary_drift(rows, "no-such-node") is None
    finally:
        p.context.store.close()
