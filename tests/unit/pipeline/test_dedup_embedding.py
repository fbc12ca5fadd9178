"""One text, one embedding: a share's copies of a document (``report (1).docx``, hard links, a file
saved in two folders) are embedded once, not once per copy (twenty copies cost twenty embeddings
of every chunk: a build embedded 746 texts, 138 distinct)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from ingestor.cli import factories
from ingestor.config import Settings
from ingestor.pipeline.vectors import DedupingEmbedder
from testkit.corpus import doc_text
from testkit.fakes import CountingEmbedder


def test_copies_in_a_share_are_embedded_once_by_the_products_pipeline(tmp_path: Path) -> None:
    root = tmp_path / "share"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    text = doc_text(random.Random(1), 30)
    for i in range(8):
        (root / ("a" if i % 2 else "b") / f"report ({i}).txt").write_text(text)
    (root / "other.txt").write_text(doc_text(random.Random(2), 10))
    settings = Settings(_env_file=None, state_dir=tmp_path / "state", tree="t")  # type: ignore[call-arg]
    inner = CountingEmbedder()
    store = factories.make_store(settings)
    try:
        p = factories.make_pipeline(settings, store, inner)
        p.build(root)
        state = p.require_state()
        leaves = [n for n in state.nodes.values() if n.layer == 0]
        assert len({n.source for n in leaves}) == 9
        assert len(inner.texts) == len(set(inner.texts)), "a text embedded twice"
        first = {}
        for n in leaves:  # every copy's leaf has the one vector of its text
            vec = state.matrix([n.node_id])[0]
            np.testing.assert_array_equal(first.setdefault(n.text, vec), vec)
        before = len(inner.texts)
        (root / "c.txt").write_text(text)  # a copy added later: the vectors kept lately
        p.update([root / "c.txt"])
        assert not set(inner.texts[before:]) & {n.text for n in leaves}
    finally:
        store.close()


def test_the_recent_texts_are_bounded_and_the_order_kept() -> None:
    inner = CountingEmbedder()
    emb = DedupingEmbedder(inner, keep=3)
    texts = ["a", "b", "a", "c", "b"]
    out = emb.embed_documents(texts)
    np.testing.assert_array_equal(out, inner.embed_documents(texts))
    assert inner.texts[:3] == ["a", "b", "c"]
    emb.embed_documents(["d", "e"])  # a, b pushed out (the last 3: c, d, e)
    del inner.texts[:]
    emb.embed_documents(["e", "a"])
    assert inner.texts == ["a"]
    assert emb.reused == 2 + 1
    assert emb.embed_query("q").shape == (emb.dim,)


@pytest.mark.parametrize("text", ["caf\udce9 menu", ""])
def test_any_text_has_a_key(text: str) -> None:
    emb = DedupingEmbedder(CountingEmbedder())
    assert emb.embed_documents([text, text]).shape == (2, emb.dim)
