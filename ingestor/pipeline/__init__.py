"""The data path, short and visible: folder → chunks → embeddings → tree → Qdrant → state.

Split by stage, each given the parts it uses: ``context`` (the tree's adapters and its crash-safe
writes), ``collect`` (read the folder), ``build`` (chunk, embed, build the layers, store),
``apply`` (adRAP batches), ``reconcile`` (the :class:`Pipeline` composing them; agree with the
folder and the store after a crash or downtime).
"""

from typing import TYPE_CHECKING

from ingestor.tree.persist import commit_state, load_state, state_exists, state_name

if TYPE_CHECKING:
    from ingestor.pipeline.reconcile import Pipeline
    from ingestor.pipeline.reports import BuildReport, UpdateReport

_LAZY = {
    "Pipeline": "ingestor.pipeline.reconcile",
    "BuildReport": "ingestor.pipeline.reports",
    "UpdateReport": "ingestor.pipeline.reports",
}


def __getattr__(name: str) -> object:
    """Import the stages on first use: ``adrap status`` reads ``unread`` without UMAP and sklearn."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ingestor.pipeline' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "BuildReport",
    "Pipeline",
    "UpdateReport",
    "commit_state",
    "load_state",
    "state_exists",
    "state_name",
]
