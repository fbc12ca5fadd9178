"""Fixtures of the service tests: no thread leaks, and a built tree on a real qdrant-edge shard."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingestor.pipeline import Pipeline
from tests.unit.service.test_watcher import make_pipeline, write_corpus


@pytest.fixture(autouse=True)
def no_thread_leaks() -> Iterator[None]:
    """Every observer, worker and HTTP thread a test starts is joined before it ends."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        leaked = [
            t
            for t in threading.enumerate()
            if t not in before and t.is_alive() and t.name != "tqdm_monitor"  # tqdm's singleton
        ]
        if not leaked:
            return
        time.sleep(0.05)
    raise AssertionError(f"threads leaked: {leaked}")


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Pipeline, Path]]:
    root = tmp_path / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp_path)
    p.build(root)
    yield p, root.resolve()
    p.context.store.close()
