"""Persistence of a tree's state in models_store: load it, refuse an incompatible one, commit it."""

from __future__ import annotations

from ingestor.errors import TreeError
from ingestor.tree.state import TreeState
from models_store import ModelStore
from retriever import SCHEMA_VERSION, Embedder


def state_name(tree: str) -> str:
    """Return the models_store object name of a tree's state."""
    return f"tree-{tree}"


def load_state(models: ModelStore, tree: str, embedder: Embedder) -> TreeState | None:
    """Return the committed state of ``tree``, or None if it was never built.

    Raises:
        models_store.IncompatibleModelError: written for another embedding model or libraries.
    """
    name = state_name(tree)
    if not models.exists(name):
        return None
    state = models.load(name, expect={"embed_model": embedder.model_id, "dim": embedder.dim})
    if not isinstance(state, TreeState):
        raise TreeError(f"{models.root / name} does not hold a tree state; delete it and rebuild")
    return state


def commit_state(models: ModelStore, state: TreeState) -> None:
    """Persist ``state`` atomically as the next generation."""
    state.generation += 1
    models.save(
        state_name(state.tree),
        state,
        extra={"embed_model": state.embed_model, "dim": state.dim, "schema": SCHEMA_VERSION},
    )
