"""The composition root (cli/factories.make_daemon_parts): the daemon's parts built once from the
settings, and a daemon that uses them as given, replacing, rebinding or patching nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from ingestor.cli.factories import make_daemon_parts, make_pipeline
from ingestor.config import Settings
from ingestor.pipeline.vectors import DedupingEmbedder
from ingestor.service.concurrency import LockedStore
from ingestor.service.daemon import Daemon, DaemonParts
from retriever.edge_store import EdgeNodeStore
from testkit.fakes import HashEmbedder


def settings_in(tmp_path: Path, **watch: object) -> Settings:
    base = Settings(_env_file=None, state_dir=tmp_path / "state", tree="t")  # type: ignore[call-arg]
    update = {"summary": base.summary.model_copy(update={"refresh_seconds": 300.0})}
    return base.model_copy(update={**update, "watch": base.watch.model_copy(update=watch)})


def test_the_daemon_uses_its_parts_as_given(tmp_path: Path) -> None:
    s = settings_in(
        tmp_path,
        debounce_seconds=0.25,
        http_port=0,
        http_max_tokens=40_000,
        http_token=SecretStr("tok"),
    )
    writer = HashEmbedder(dim=16)
    store = EdgeNodeStore(tmp_path / "qdrant")
    parts = make_daemon_parts(s, store, writer, owner_token="tok")
    pipeline, queries, summaries = parts.pipeline, parts.queries, parts.summaries
    assert isinstance(parts.store, LockedStore)
    assert parts.store.inner is store
    assert pipeline.context.store is parts.store
    assert queries.store is parts.store
    used = pipeline.context.embedder
    assert isinstance(used, DedupingEmbedder), "a share's copies: one text, one embedding"
    assert used.inner is writer
    assert queries.embedder is not writer, "queries: their own"
    assert queries.defaults.max_tokens_limit == 40_000, "the setting raises the bound"
    # The pipeline's updates ask the schedule (a 300 s window defers the summaries).
    assert pipeline.apply_stage.defer_summaries() is True

    d = Daemon(parts, tmp_path, s)
    assert (d.pipeline, d.store, d.queries, d.summaries, d.callers) == (
        pipeline,
        parts.store,
        queries,
        summaries,
        parts.callers,
    )
    assert pipeline.context.store is parts.store, "nothing rebound"
    assert queries.store is parts.store, "nothing rebound"
    assert queries.embedder is parts.queries.embedder
    assert (d.watch.debounce_seconds, d.http_port, d.http_token) == (0.25, 0, "tok")
    assert d.limits.max_tokens == 40_000
    assert d.exclude == [(tmp_path / "state").resolve()], "the state dir is never indexed"
    store.close()


def test_parts_not_built_over_the_locked_store_are_refused(tmp_path: Path) -> None:
    s = settings_in(tmp_path)
    store = EdgeNodeStore(tmp_path / "qdrant")
    parts = make_daemon_parts(s, store, HashEmbedder(dim=16), owner_token=None)
    raw = make_pipeline(s, store, HashEmbedder(dim=16))  # over the store itself, not the lock
    with pytest.raises(ValueError, match=r"pipeline\.store is EdgeNodeStore, not the locked store"):
        DaemonParts(raw, parts.store, parts.queries, parts.summaries, parts.callers, parts.changes)
    store.close()
