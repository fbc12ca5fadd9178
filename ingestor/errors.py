"""Errors raised by the ingestor.

    IngestError
    ├── SourceError          a file could not be read or decoded (the daemon logs and skips it)
    ├── ConfigError          a setting is invalid or names something that does not exist
    ├── SummarizationError   a summariser failed after its retries (never stored as text)
    └── TreeError            the tree state is inconsistent or was written by another setup

Store and embedding failures are ``retriever.StoreError`` / ``retriever.EmbeddingError``.
"""


class IngestError(Exception):
    """Base of every ingestor error."""


class SourceError(IngestError):
    """A document could not be read: the message names the file, the reason and the fix."""


class ConfigError(IngestError):
    """A setting is invalid."""


class SummarizationError(IngestError):
    """A summary could not be produced."""


class TreeError(IngestError):
    """The tree state cannot be used as it is."""
