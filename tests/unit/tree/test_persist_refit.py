"""A layer whose groups were refitted (ingestor.cluster.group_refit) round-trips through the state
database: the replaced local models, online GMMs, guarded groups and their counters."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from ingestor.cluster.adaptive import AdaptiveLayer
from ingestor.pipeline import load_state
from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline, write_corpus


def clusters(al: AdaptiveLayer) -> dict[int, list[str]]:
    groups = {g for g, _ in al.point_of.values()}
    out: dict[int, list[str]] = {}
    for g in groups:
        gmm = al.gmms[g]
        ids = [al.guarded[g][0]] if gmm is None else list(gmm.members)
        out.update({cid: al.members(cid) for cid in ids})
    return out


def test_refitted_groups_are_committed_and_read_back(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    rng = random.Random(1)
    write_corpus(root, rng, 24)
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.build(root)
    before = p.require_state().layers[0].refits
    # Replace most of the folder in two updates: most groups turn over and are refitted.
    for step in range(2):
        gone = sorted(root.glob("d*.txt"))[:10]
        for f in gone:
            f.unlink()
        made = [root / f"n{step}_{i}.txt" for i in range(12)]
        for f in made:
            f.write_text(doc_text(rng, rng.randint(4, 10)))
        p.update(gone + made)
    check_invariants(p)
    state = p.require_state()
    al = state.layers[0]
    assert al.refits > before, "the updates refitted at least one group"
    expected = [clusters(layer) for layer in state.layers]
    counters = [(g.churn, g.fitted) if g is not None else None for g in al.gmms]
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "models", copy)  # read what is on disk, not the live state
    loaded = load_state(type(p.context.models)(copy), "t", readonly=True)
    assert loaded is not None
    assert [clusters(layer) for layer in loaded.layers] == expected
    l0 = loaded.layers[0]
    assert l0.refits == al.refits
    assert [(g.churn, g.fitted) if g is not None else None for g in l0.gmms] == counters
    for g, gmm in enumerate(l0.gmms):
        local = l0.clusterer.local_models_[g]
        assert (gmm is None) == (local.gmm is None)
        if gmm is not None:
            assert len(local.embedding) == gmm.fitted
