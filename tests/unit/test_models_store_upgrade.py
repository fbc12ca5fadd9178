"""A library upgrade keeps the paid work: a state written with older minor versions of the
clustering libraries opens with every summary; a model that cannot be read asks for a refit."""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import sqlite3
from pathlib import Path

import pytest

from ingestor.tree.persist import load_state, state_path
from models_store import IncompatibleModelError, ModelStore
from models_store.manifest import PINNED_LIBRARIES
from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import doc_text, make_pipeline


def test_a_state_written_by_older_umap_and_sklearn_opens_with_every_summary(
    tmp_path: Path,
) -> None:
    rng = random.Random(7)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(20):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 8)))
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.build(root)
    before = p.require_state()
    summaries = {k: n.text for k, n in before.nodes.items() if n.layer > 0}
    cached = dict(before.summary_cache.items())
    assert summaries
    assert cached
    path = state_path(p.context.models, "t")
    with sqlite3.connect(path) as db:
        (raw,) = db.execute("SELECT value FROM manifest WHERE key = 'libraries'").fetchone()
        libraries = json.loads(raw)
        libraries |= {"umap-learn": "0.4.6", "scikit-learn": "1.0.2", "numpy": "1.21.0"}
        db.execute(
            "UPDATE manifest SET value = ? WHERE key = 'libraries'", (json.dumps(libraries),)
        )
    state = load_state(p.context.models, "t", p.context.embedder)
    assert state is not None
    assert {k: n.text for k, n in state.nodes.items() if n.layer > 0} == summaries
    assert dict(state.summary_cache.items()) == cached
    p.context.store.close()


def test_only_libraries_the_models_pickle_are_recorded() -> None:
    assert set(PINNED_LIBRARIES) == {"numpy", "scikit-learn", "umap-learn"}  # no joblib


class _Gone:
    """A class that a later release of a library no longer has."""


def test_a_model_the_installed_libraries_cannot_read_asks_for_a_refit(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.save("clusterer", _Gone())
    blob = tmp_path / "clusterer" / "1" / "object.pkl"
    manifest = tmp_path / "clusterer" / "1" / "manifest.json"
    data = pickle.dumps(_Gone()).replace(b"_Gone", b"_Lost")  # its class is gone now
    blob.write_bytes(data)
    meta = json.loads(manifest.read_text())
    meta["sha256"] = hashlib.sha256(data).hexdigest()
    meta["libraries"]["umap-learn"] = "0.4.6"
    manifest.write_text(json.dumps(meta))
    with pytest.raises(IncompatibleModelError, match=r"umap-learn 0\.4\.6.*refitted") as info:
        store.load("clusterer")
    assert isinstance(info.value.__cause__, AttributeError)
