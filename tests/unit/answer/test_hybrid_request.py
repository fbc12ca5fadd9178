"""Which searches of a request are hybrid: the collapsed tree and postQFRAP's leaves/collapsed
base (they measured better), never traversal; ``hybrid=false`` and the setting turn it off."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ingestor.answer.service import QueryDefaults, QueryService, parse_request
from retriever.schema import ScoredNode
from testkit.fakes import HashEmbedder
from tests.contracts.test_node_store import make_node


class RecordingStore:
    """Answers every search with one leaf and records the ``text`` each was given."""

    def __init__(self) -> None:
        self.texts: list[str | None] = []
        self.node = make_node("a", n_tokens=5)

    def search(self, vector: Any, flt: Any, limit: int, *, text: str | None = None) -> Any:
        self.texts.append(text)
        return [ScoredNode(self.node, 0.5)]

    def search_budget(self, vector: Any, flt: Any, limit: int, max_tokens: int, **kw: Any) -> Any:
        self.texts.append(kw.get("text"))
        return [ScoredNode(self.node, 0.5)]

    def count(self, flt: Any) -> int:
        return 1 if flt.max_layer in (None, 0) and flt.min_layer in (None, 0) else 0

    def retrieve(self, ids: Any) -> list[Any]:
        return [self.node]

    def retrieve_vectors(self, ids: Any) -> Any:
        return np.ones((len(ids), 16), dtype=np.float32) / 4.0


def run(params: dict[str, str], defaults: QueryDefaults | None = None) -> list[str | None]:
    store = RecordingStore()
    service = QueryService(store, HashEmbedder(16), "t1", defaults=defaults)  # type: ignore[arg-type]
    service.context(service.parse({"q": "who is zx4711", **params}))
    return store.texts


def test_collapsed_and_postqfrap_bases_search_hybrid_and_traversal_dense() -> None:
    assert set(run({})) == {"who is zx4711"}
    assert set(run({"mode": "postqfrap", "base": "leaves"})) == {"who is zx4711"}
    assert set(run({"mode": "postqfrap", "base": "collapsed"})) == {"who is zx4711"}
    assert set(run({"mode": "traversal"})) == {None}
    assert set(run({"mode": "postqfrap", "base": "traversal"})) == {None}


def test_hybrid_false_or_the_setting_searches_dense_only() -> None:
    assert set(run({"hybrid": "false"})) == {None}
    assert set(run({}, QueryDefaults(hybrid=False))) == {None}
    assert set(run({"hybrid": "true"}, QueryDefaults(hybrid=False))) == {"who is zx4711"}
    with pytest.raises(ValueError, match="hybrid must be true or false"):
        parse_request({"q": "x", "hybrid": "maybe"}, tree="t1", defaults=QueryDefaults())
