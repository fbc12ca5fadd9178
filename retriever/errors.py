"""Errors raised by the retriever package.

RetrieverError
├── SchemaMismatchError   a point, collection or meta point does not match this contract
├── StoreError            the Qdrant engine (embedded or server) failed or is unreachable
│   ├── StoreBusyError    the embedded store is held by another process (retry, or ask it)
│   └── StoreFullError    too little free disk space for the embedded store to write safely
└── EmbeddingError        the query/document embedder failed to load or run
"""


class RetrieverError(Exception):
    """Base of every retriever error."""


class SchemaMismatchError(RetrieverError):
    """Stored data was written by another schema version, embedding model or dimension."""


class StoreError(RetrieverError):
    """The node store failed; the message names the store and the fix."""


class StoreBusyError(StoreError):
    """Another process holds the embedded store (one process at a time): wait, or ask it."""


class StoreFullError(StoreError):
    """Too little free space on the embedded store's disk to write safely: free some, retry."""


class EmbeddingError(RetrieverError):
    """The embedding model could not be loaded or run."""
