"""``ADRAP_ADRAP__REFIT_SHARE``: how much of a group may change before it is clustered again as a
build would (issue 55). The share's effect on one layer is tested in
tests/unit/cluster/test_group_refit.py; here, that the setting reaches the trees that exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestor.cluster.layer_state import REFIT_SHARE
from ingestor.config import Settings
from ingestor.tree.adrap import TreeUpdater
from tests.unit.tree.test_adrap_soundness import texts
from tests.unit.tree.trees import add_leaves, make_builder, new_state, real_clusterer


def test_the_settings_default_is_the_layers_default() -> None:
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.adrap.refit_share == REFIT_SHARE


def test_an_update_applies_the_running_share_to_a_tree_built_with_another() -> None:
    """The share is a policy of the upkeep, not of the tree's shape: a tree built under one
    value is kept under the value its updates run with (it was kept as built, so a changed
    setting reached only trees built after it)."""
    state, _ = new_state(texts(60))
    make_builder(real_clusterer, refit_share=0.9).build(state)
    assert {al.refit_share for al in state.layers} == {0.9}
    builder = make_builder(real_clusterer, refit_share=0.15)
    new = add_leaves(state, texts(3, seed=7), prefix="later")
    TreeUpdater(builder).apply(state, new, [])
    assert {al.refit_share for al in state.layers} == {0.15}


def test_the_setting_reaches_the_pipelines_tree_params(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ingestor.cli.factories import make_pipeline
    from retriever.edge_store import EdgeNodeStore
    from testkit.fakes import HashEmbedder

    monkeypatch.setenv("ADRAP_ADRAP__REFIT_SHARE", "0.2")
    s = Settings(_env_file=None, state_dir=tmp_path)  # type: ignore[call-arg]
    with EdgeNodeStore(tmp_path / "qdrant") as store:
        p = make_pipeline(s, store, HashEmbedder())
        assert p.context.builder.summaries.params.refit_share == 0.2
    monkeypatch.setenv("ADRAP_ADRAP__REFIT_SHARE", "0")
    with pytest.raises(ValueError, match="refit_share"):
        Settings(_env_file=None)  # type: ignore[call-arg]
