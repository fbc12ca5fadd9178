"""A question asked while the store switches to the new embedding model is embedded with the
model of the store it searches: the switch and the query embedder's follow happen under the
daemon's query lock, so a question waits for both (without it, a question in between was
embedded with the old model and searched in the new store: a dimension error, or vectors of
two models compared). Real qdrant-edge shard; hashed embedders of two sizes."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from ingestor.answer.service import QueryService
from ingestor.pipeline import Pipeline
from ingestor.tree.model_change import ModelChange
from retriever.model_switch import EdgeNext, FollowingEmbedder
from tests.unit.tree.test_model_change import Embedder32, built, changed

__all__ = ["built"]  # the fixture, imported for pytest


def test_a_question_asked_as_the_store_switches_waits_for_its_embedder(
    tmp_path: Path, built: tuple[Pipeline, Path], monkeypatch: Any
) -> None:
    old, root = built
    lock = threading.Lock()
    follower = FollowingEmbedder(old.context.embedder, Embedder32(), old.context.embedder.model_id)
    service = QueryService(old.context.store, follower, "t", lock=lock)
    store_switched = threading.Event()
    answers: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    real_switch = EdgeNext.switch

    def switch(self: EdgeNext) -> None:
        real_switch(self)
        store_switched.set()

    def follow() -> None:
        time.sleep(0.5)  # a slow follow: a question asked now must wait for it
        follower.switch()

    def ask() -> None:
        assert store_switched.wait(60)
        try:
            answers.append(service.query({"q": "what do the documents say"}))
        except BaseException as exc:
            errors.append(exc)

    monkeypatch.setattr(EdgeNext, "switch", switch)
    p = changed(tmp_path, old, Embedder32(), on_switch=follow)
    assert isinstance(p.context.model_change, ModelChange)
    p.context.model_change.queries = lock
    asker = threading.Thread(target=ask)
    asker.start()
    p.reconcile(root)
    asker.join(60)
    assert errors == [], f"a question in the switch failed: {errors}"
    assert answers
    assert answers[0]["hits"], "the question found nothing in the new store"
