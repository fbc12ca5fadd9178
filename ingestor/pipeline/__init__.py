"""The data path, short and visible: folder → chunks → embeddings → tree → Qdrant → state.

Split by stage, each given the parts it uses: ``context`` (the tree's adapters and its crash-safe
writes), ``collect`` (read the folder), ``build`` (chunk, embed, build the layers, store),
``apply`` (adRAP batches), ``reconcile`` (the :class:`Pipeline` composing them; agree with the
folder and the store after a crash or downtime).
"""

from ingestor.pipeline.reconcile import Pipeline
from ingestor.pipeline.reports import BuildReport, UpdateReport
from ingestor.tree.persist import commit_state, load_state, state_exists, state_name

__all__ = [
    "BuildReport",
    "Pipeline",
    "UpdateReport",
    "commit_state",
    "load_state",
    "state_exists",
    "state_name",
]
