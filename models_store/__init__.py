"""Persistence of everything needed to continue a tree without refitting (no Qdrant, no files)."""

from models_store.changes import Changes
from models_store.errors import CorruptModelError, IncompatibleModelError, ModelStoreError
from models_store.manifest import Manifest, library_changes, library_versions
from models_store.rows import RowStore
from models_store.store import ModelStore, write_atomic
from models_store.unpickle import library_imports, rebind_submodules, unpickle

__all__ = [
    "Changes",
    "CorruptModelError",
    "IncompatibleModelError",
    "Manifest",
    "ModelStore",
    "ModelStoreError",
    "RowStore",
    "library_changes",
    "library_imports",
    "library_versions",
    "rebind_submodules",
    "unpickle",
    "write_atomic",
]
