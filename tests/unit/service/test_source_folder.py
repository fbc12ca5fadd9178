"""A source filter written without its ``/`` names the folder where no file has that name: the
tree's owner's CLI adds the ``/`` from the tree's state, but another account's cannot read the
state, and ``--source hr`` matched nothing without a word. The daemon's query decides it now, by
counting under the caller's own filter."""

from __future__ import annotations

import random
from pathlib import Path

from ingestor.answer.service import QueryService
from ingestor.pipeline import Pipeline
from testkit.corpus import doc_text
from tests.unit.service.test_watcher import make_pipeline


def _sources(service: QueryService, source: str) -> set[str]:
    out = service.query({"q": "orchard harvest", "source": source, "max_tokens": "4000"})
    return {h["source"] for h in out["hits"] if h["layer"] == 0}


def test_a_folder_named_without_its_slash_is_the_folder(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    rng = random.Random(0)
    for rel in ("hr/a.txt", "hr/b.txt", "hr-old/c.txt", "d.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(doc_text(rng, 5))
    p: Pipeline = make_pipeline(tmp_path)
    p.build(root)
    try:
        service = QueryService(p.context.store, p.context.embedder, p.context.tree)
        assert _sources(service, "hr") == {"hr/a.txt", "hr/b.txt"}, "not hr-old/"
        assert _sources(service, "/hr/") == {"hr/a.txt", "hr/b.txt"}
        assert _sources(service, "./hr/a.txt") == {"hr/a.txt"}
        assert _sources(service, "d.txt") == {"d.txt"}, "a file stays the file"
        assert _sources(service, "nothing-here") == set()
    finally:
        p.context.store.close()
