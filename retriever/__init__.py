"""adrap's retriever: the Qdrant point contract and RAPTOR search over it.

The bottom layer of adrap: it never imports the ingestor, models_store, umap, sklearn, watchdog or
openai, so a query service can install just this.
"""

from typing import TYPE_CHECKING

from retriever.budget import DEFAULT_FILL, PAPERS_FILL, FillRule
from retriever.errors import (
    EmbeddingError,
    RetrieverError,
    SchemaMismatchError,
    StoreBusyError,
    StoreError,
    StoreFullError,
)
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
    answer_json,
    collapsed_tree,
    fill_budget,
    format_context,
    run_query,
    tree_traversal,
)

if TYPE_CHECKING:
    from retriever.edge_store import EdgeNodeStore
    from retriever.embedding import SentenceTransformerEmbedder
    from retriever.embedding_openai import OpenAIEmbedder
    from retriever.facade.edge import EdgeRestReader, RestSearchRequest
    from retriever.numpy_bert import NumpyBertEmbedder
    from retriever.qdrant_connect import connect
    from retriever.qdrant_store import QdrantNodeStore
    from retriever.torch_bert import TorchBertEmbedder

_LAZY = {
    "EdgeNodeStore": "retriever.edge_store",
    "EdgeRestReader": "retriever.facade.edge",
    "RestSearchRequest": "retriever.facade.edge",
    "QdrantNodeStore": "retriever.qdrant_store",
    "connect": "retriever.qdrant_connect",
    "SentenceTransformerEmbedder": "retriever.embedding",
    "OpenAIEmbedder": "retriever.embedding_openai",
    "NumpyBertEmbedder": "retriever.numpy_bert",
    "TorchBertEmbedder": "retriever.torch_bert",
}


def __getattr__(name: str) -> object:
    """Import the store adapters and the embedder on first use (they pull in heavy engines)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'retriever' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "DEFAULT_COLLECTION",
    "DEFAULT_FILL",
    "DEFAULT_MAX_TOKENS",
    "PAPERS_FILL",
    "SCHEMA_VERSION",
    "VECTOR_NAME",
    "EdgeNodeStore",
    "EdgeRestReader",
    "Embedder",
    "EmbeddingError",
    "F",
    "FillRule",
    "Kind",
    "MetaPayload",
    "NodePayload",
    "NodeStore",
    "NumpyBertEmbedder",
    "OpenAIEmbedder",
    "QdrantNodeStore",
    "RestSearchRequest",
    "RetrieverError",
    "SchemaMismatchError",
    "ScoredNode",
    "SearchFilter",
    "SentenceTransformerEmbedder",
    "StoreBusyError",
    "StoreError",
    "StoreFullError",
    "TorchBertEmbedder",
    "answer_json",
    "collapsed_tree",
    "connect",
    "fill_budget",
    "format_context",
    "point_id",
    "run_query",
    "source_dirs",
    "tree_traversal",
]
