"""After a library upgrade, fitted models that cannot be read are refitted from the stored vectors:
the next update succeeds, the clusters, summaries and summary cache are kept, and it is logged."""

from __future__ import annotations

import json
import logging
import pickle
import random
import sqlite3
from collections import OrderedDict
from pathlib import Path

import pytest

from ingestor.pipeline import Pipeline
from ingestor.tree import layer_store
from ingestor.tree.invariants import violations
from ingestor.tree.layer_store import unreadable_models
from ingestor.tree.model_repair import repair_models
from ingestor.tree.model_rows import ModelRows
from ingestor.tree.persist import commit_state, load_state, state_path
from ingestor.tree.rowmap import Clock
from models_store import IncompatibleModelError
from testkit.fakes import EchoSummarizer, HashEmbedder
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline, write_corpus
from tests.unit.tree.test_persist_refit import clusters

OLD_LIBRARIES = {"umap-learn": "0.4.6", "scikit-learn": "1.0.2", "numpy": "1.21.0"}


class _Gone:
    """A class that a later release of a library no longer has."""


#: A pickle whose class cannot be found any more (what an upgraded library does to a blob).
UNREADABLE = pickle.dumps(_Gone()).replace(b"_Gone", b"_Lost")


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Pipeline, Path]:
    root = tmp_path / "docs"
    write_corpus(root, random.Random(3), 24)
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.build(root)
    # A new process after the upgrade: no clusterer bytes remembered from before.
    monkeypatch.setattr(layer_store, "_HEADS", OrderedDict())
    return p, root


def _break_models(
    p: Pipeline, *, heads: bool = True, groups: bool = True, libraries: bool = True
) -> int:
    """Make the stored models unreadable, as an upgrade of their libraries can; return how many."""
    broken = 0
    layer_store._HEADS.clear()  # read from the database, as a new process does
    with sqlite3.connect(state_path(p.context.models, "t")) as db:
        if heads:
            broken += db.execute(
                "UPDATE rows SET value = ? WHERE ns GLOB 'L*.head' AND key = 'clusterer'",
                (UNREADABLE,),
            ).rowcount
        if groups:
            broken += db.execute(
                "UPDATE rows SET value = ? WHERE ns GLOB 'L*.local'", (UNREADABLE,)
            ).rowcount
            rows = db.execute("SELECT ns, key, value FROM rows WHERE ns GLOB 'L*.gmms'").fetchall()
            for ns, key, value in rows:
                if pickle.loads(value) is not None:  # a guarded group has no online GMM
                    db.execute(
                        "UPDATE rows SET value = ? WHERE ns = ? AND key = ?", (UNREADABLE, ns, key)
                    )
                    broken += 1
        if libraries:
            for entry in ("libraries", "model_libraries"):
                got = db.execute("SELECT value FROM manifest WHERE key = ?", (entry,)).fetchone()
                if got is not None:
                    db.execute(
                        "UPDATE manifest SET value = ? WHERE key = ?",
                        (json.dumps(json.loads(got[0]) | OLD_LIBRARIES), entry),
                    )
    return broken


def _summaries(p: Pipeline) -> dict[str, str]:
    return {k: n.text for k, n in p.require_state().nodes.items() if n.layer > 0}


def test_unreadable_models_are_refitted_keeping_every_cluster_and_summary(
    built: tuple[Pipeline, Path], caplog: pytest.LogCaptureFixture
) -> None:
    p, _ = built
    before = p.require_state()
    expected = [clusters(layer) for layer in before.layers]
    summaries = _summaries(p)
    cache = dict(before.summary_cache.items())
    assert any(g is not None for g in before.layers[0].gmms), "a group with a local model"
    assert _break_models(p) > len(before.layers)

    state = p.require_state()
    with caplog.at_level(logging.INFO, logger="ingestor.tree.model_repair"):
        deltas = repair_models(state, p.context.builder.summaries.make_clusterer)
    assert deltas == {}, "no cluster changed"
    assert [clusters(layer) for layer in state.layers] == expected
    assert {k: n.text for k, n in state.nodes.items() if n.layer > 0} == summaries
    assert violations(state) == []
    (line,) = [r.getMessage() for r in caplog.records if r.name == "ingestor.tree.model_repair"]
    assert "layer 0: global model and" in line
    assert "umap-learn 0.4.6" in line
    commit_state(p.context.models, state)

    reopened = p.require_state()
    assert all(not unreadable_models(al, scan=True) for al in reopened.layers)
    assert [clusters(layer) for layer in reopened.layers] == expected
    assert dict(reopened.summary_cache.items()) == cache
    assert not reopened.model_libraries.items() & OLD_LIBRARIES.items()


def test_the_next_add_after_an_upgrade_succeeds_and_pays_only_for_its_own_clusters(
    built: tuple[Pipeline, Path], caplog: pytest.LogCaptureFixture
) -> None:
    p, root = built
    summaries = _summaries(p)
    cache = dict(p.require_state().summary_cache.items())
    _break_models(p)
    new = root / "new.txt"
    new.write_text(doc_text(random.Random(11), 6))
    with caplog.at_level(logging.INFO, logger="ingestor.tree.model_repair"):
        report = p.update([new])
    assert report.stats is not None
    assert any("refitted" in r.getMessage() for r in caplog.records)
    check_invariants(p)
    state = p.require_state()
    assert state.sources["new.txt"].node_ids
    rewritten = {k for k, text in _summaries(p).items() if summaries.get(k, text) != text}
    assert rewritten <= report.stats.upserted, "only summaries of clusters the add changed"
    kept = [k for k in summaries if k in state.nodes and k not in report.stats.upserted]
    assert len(kept) > len(summaries) // 2
    assert cache.items() <= dict(state.summary_cache.items()).items(), "the cache is kept"


def test_a_clusterer_that_cannot_be_read_is_refitted_without_a_library_change(
    built: tuple[Pipeline, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The clusterer is read when the layer opens, so a damaged one is known at no cost."""
    p, root = built
    expected = [clusters(layer) for layer in p.require_state().layers]
    _break_models(p, groups=False, libraries=False)
    state = p.require_state()
    with caplog.at_level(logging.INFO, logger="ingestor.tree.model_repair"):
        assert repair_models(state, p.context.builder.summaries.make_clusterer) == {}
    assert [clusters(layer) for layer in state.layers] == expected
    assert any("global model" in r.getMessage() for r in caplog.records)
    (root / "d0.txt").unlink()
    p.update([root / "d0.txt"])
    check_invariants(p)


def test_a_local_model_that_cannot_be_read_names_itself_and_the_refit() -> None:
    rows = ModelRows("L0.local", Clock())
    with pytest.raises(IncompatibleModelError, match=r"L0\.local/3.*refits it") as info:
        rows._decode("3", UNREADABLE)
    assert isinstance(info.value.__cause__, AttributeError)


def test_only_another_embedding_model_refuses_the_state_and_says_what_happens_to_the_cache(
    built: tuple[Pipeline, Path],
) -> None:
    p, _ = built
    cache = dict(p.require_state().summary_cache.items())
    _break_models(p, heads=False, groups=False)  # other library versions: no refusal
    assert load_state(p.context.models, "t", p.context.embedder) is not None
    other = HashEmbedder(dim=48)
    other.model_id = "another-model"
    with pytest.raises(IncompatibleModelError, match="embedding model 'hash-48'") as info:
        load_state(p.context.models, "t", other)
    message = str(info.value)
    assert "any writing command" in message, "a writer changes the model (test_model_change.py)"
    assert "keeps every summary" in message
    kept = load_state(p.context.models, "t", p.context.embedder)
    assert kept is not None
    assert dict(kept.summary_cache.items()) == cache
