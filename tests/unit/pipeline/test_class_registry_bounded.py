"""The access classes a tree remembers stay the ones its points name: a file whose permissions
change again and again (a share kept for years) left every class it ever had in the registry,
its file rewritten whole at each new one, and every restricted reader's filter listing them all.
A full permission pass now forgets the classes no point names; a stale summary keeps its own."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.pipeline.access import TreeAccess, named_classes
from ingestor.read.access_classes import ClassRegistry, Identity
from ingestor.tree.build import TreeBuilder, TreeParams
from models_store import ModelStore
from retriever.edge_store import EdgeNodeStore
from testkit.corpus import doc_text
from testkit.fakes import CountingEmbedder, EchoSummarizer

OTHER = Identity("someone else", 54321, frozenset({54321}))


def _pipeline(tmp: Path, registry: ClassRegistry) -> Pipeline:
    emb = CountingEmbedder()
    builder = TreeBuilder(
        emb,
        EchoSummarizer(),
        lambda: TreeClusterer(random_state=0, n_epochs=50),
        TreeParams(summary_max_tokens=40),
    )
    return Pipeline(
        tree="t",
        embedder=emb,
        builder=builder,
        store=EdgeNodeStore(tmp / "state" / "qdrant"),
        models=ModelStore(tmp / "state" / "models"),
        chunk_tokens=40,
        chunk_overlap=8,
        drift_threshold=100.0,
        access=TreeAccess(registry),
    )


def test_a_full_pass_forgets_the_classes_no_point_names(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    rng = random.Random(0)
    for i in range(6):
        (root / f"d{i}.txt").write_text(doc_text(rng, 6))
        os.chmod(root / f"d{i}.txt", 0o644)
    path = tmp_path / "classes.json"
    registry = ClassRegistry(path)
    p = _pipeline(tmp_path, registry)
    p.build(root)
    try:
        state = p.require_state()
        for mode in (0o600, 0o640, 0o604, 0o660, 0o606, 0o644, 0o600):
            os.chmod(root / "d0.txt", mode)
            p.update_access(state)
            named = named_classes(state, p.context.access.counts)
            assert registry.ids() == named, f"mode {mode:o}: only the classes points name"
            assert len(json.loads(path.read_text())) == len(named)
        assert len(registry) == 2, "the world-readable files' class and d0's 600"
        assert registry.readable(OTHER) == (state.sources["d1.txt"].access,)
        stored = {c for n in p.context.store.retrieve(list(state.nodes)) for c in n.access}
        assert stored <= registry.ids(), "every class a point names is still judged"
        assert len(ClassRegistry(path)) == 2, "as the file says, for the next process"
    finally:
        p.context.store.close()
