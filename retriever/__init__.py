"""adrap's retriever: the Qdrant point contract and RAPTOR search over it.

The bottom layer of adrap: it never imports the ingestor, models_store, umap, sklearn, watchdog or
openai, so a query service can install just this.
"""

from retriever.errors import EmbeddingError, RetrieverError, SchemaMismatchError, StoreError
from retriever.protocols import Embedder, NodeStore
from retriever.schema import (
    DEFAULT_COLLECTION,
    SCHEMA_VERSION,
    VECTOR_NAME,
    F,
    Kind,
    MetaPayload,
    NodePayload,
    ScoredNode,
    SearchFilter,
    point_id,
    source_dirs,
)
from retriever.search import (
    DEFAULT_MAX_TOKENS,
    collapsed_tree,
    fill_budget,
    format_context,
    tree_traversal,
)

__all__ = [
    "DEFAULT_COLLECTION",
    "DEFAULT_MAX_TOKENS",
    "SCHEMA_VERSION",
    "VECTOR_NAME",
    "Embedder",
    "EmbeddingError",
    "F",
    "Kind",
    "MetaPayload",
    "NodePayload",
    "NodeStore",
    "RetrieverError",
    "SchemaMismatchError",
    "ScoredNode",
    "SearchFilter",
    "StoreError",
    "collapsed_tree",
    "fill_budget",
    "format_context",
    "point_id",
    "source_dirs",
    "tree_traversal",
]
