from __future__ import annotations

import json
from pathlib import Path

import pytest

from models_store import CorruptModelError, IncompatibleModelError, ModelStore


def test_save_then_load_returns_the_object_and_bumps_the_version(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    assert store.save("tree-a", {"x": [1, 2]}, extra={"embed_model": "m"}) == 1
    assert store.save("tree-a", {"x": [3]}, extra={"embed_model": "m"}) == 2
    assert store.load("tree-a") == {"x": [3]}
    assert store.current_version("tree-a") == 2


def test_only_the_last_versions_are_kept(tmp_path: Path) -> None:
    store = ModelStore(tmp_path, keep=2)
    for i in range(5):
        store.save("s", i)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["4", "5", "CURRENT"]


def test_a_crash_before_current_is_rewritten_keeps_the_previous_version(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.save("s", "old")
    # Simulate a crash after the new version directory was written but before CURRENT moved.
    (tmp_path / "s" / "2.tmp").mkdir()
    (tmp_path / "s" / "2.tmp" / "object.pkl").write_bytes(b"half")
    assert store.load("s") == "old"
    assert store.save("s", "new") == 2
    assert store.load("s") == "new"


def test_load_refuses_another_embedding_model_and_says_how_to_rebuild(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.save("s", 1, extra={"embed_model": "a"})
    with pytest.raises(IncompatibleModelError, match=r"embed_model 'a'.*'b'.*adrap rebuild"):
        store.load("s", expect={"embed_model": "b"})


def test_load_reads_an_object_written_with_other_library_versions(tmp_path: Path) -> None:
    """Another minor release of a clustering library is no reason to refuse: it reads its
    predecessors' pickles; one it cannot read is refitted (the next test)."""
    store = ModelStore(tmp_path)
    store.save("s", 1)
    manifest = tmp_path / "s" / "1" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["libraries"]["scikit-learn"] = "0.1.0"
    manifest.write_text(json.dumps(data))
    assert store.load("s") == 1


def test_a_damaged_object_is_detected_by_its_checksum(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.save("s", list(range(100)))
    (tmp_path / "s" / "1" / "object.pkl").write_bytes(b"garbage")
    with pytest.raises(CorruptModelError, match="checksum"):
        store.load("s")


def test_names_that_escape_the_root_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid object name"):
        ModelStore(tmp_path).save("../x", 1)


def test_a_reader_during_a_first_build_gets_a_clear_error(tmp_path: Path) -> None:
    """`adrap status` (or a soak) opening the state while the first build has just created the
    database: not a raw sqlite3 error, not a KeyError, but a ModelStoreError saying to retry."""
    import sqlite3

    from ingestor.tree.persist import load_state, state_path
    from models_store import ModelStoreError, RowStore

    models = ModelStore(tmp_path / "models")
    path = state_path(models, "t")
    path.parent.mkdir(parents=True, exist_ok=True)
    sqlite3.connect(path).execute("PRAGMA user_version = 1").connection.close()  # file, no tables
    with pytest.raises(ModelStoreError, match="not initialised yet"):
        load_state(models, "t", readonly=True)
    RowStore(path).close()  # the schema, nothing committed
    with pytest.raises(ModelStoreError, match="no committed tree yet"):
        load_state(models, "t", readonly=True)


def test_library_versions_are_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the packages' metadata cost ~5 ms at every state commit."""
    import importlib.metadata

    from models_store import manifest

    reads: list[str] = []
    real = importlib.metadata.version

    def counting(dist: str) -> str:
        reads.append(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", counting)
    manifest._library_versions.cache_clear()
    first = manifest.library_versions()
    first["numpy"] = "changed by a caller"
    assert manifest.library_versions()["numpy"] != "changed by a caller"
    assert len(reads) == len(manifest.PINNED_LIBRARIES)
