"""Errors raised by the ingestor.

    IngestError
    ├── SourceError          a file's content cannot be used (unsupported, binary, empty, corrupt):
    │   │                    the daemon logs it once, skips the file and retries when it changes
    │   ├── SourceUnavailableError  the file exists but cannot be read *now* (EACCES, EBUSY, EIO,
    │   │                    a folder that cannot be listed): its nodes are kept, it is shown as
    │   │                    stale and retried with backoff; never treated as a deletion
    │   └── SourceGoneError  the file is gone (absent from a listing of its folder, or vanished
    │                        mid-read): the only error after which its nodes are removed
    ├── ConfigError          a setting is invalid or names something that does not exist
    ├── SummarizationError   a summariser failed after its retries (never stored as text)
    └── TreeError            the tree state is inconsistent or was written by another setup

Store and embedding failures are ``retriever.StoreError`` / ``retriever.EmbeddingError``.
"""


class IngestError(Exception):
    """Base of every ingestor error."""


class SourceError(IngestError):
    """A document could not be read: the message names the file, the reason and the fix."""


class SourceUnavailableError(SourceError):
    """The file (or folder) exists but cannot be read now; keep what was read before and retry."""


class SourceGoneError(SourceError):
    """The file is gone; its nodes may be removed."""


class ConfigError(IngestError):
    """A setting is invalid."""


class SummarizationError(IngestError):
    """A summary could not be produced."""


#: The share of a model's context window (in its server's tokens) an input limit in adrap's own
#: tokens keeps to when the server did not say how it counted the request.
UNCOUNTED_SHARE = 0.8


class ContextWindowError(SummarizationError):
    """The model refused a request longer than its context window, whose size its server named.

    Attributes:
        window: the context window in tokens, as the server counts them.
        requested: the request's tokens as the server counted them, where it said so.
    """

    def __init__(self, message: str, window: int, requested: int | None = None) -> None:
        super().__init__(message)
        self.window = window
        self.requested = requested

    def fitting_limit(self, counted: int, margin: float = 0.95) -> int:
        """An input limit in adrap's own tokens (``counted`` of this request) that fits the
        window in the server's: scaled by the ratio of the two counts where the server gave
        its count, else :data:`UNCOUNTED_SHARE` of the window."""
        if self.requested:
            return int(self.window * counted / self.requested * margin)
        return int(self.window * UNCOUNTED_SHARE)


class TreeError(IngestError):
    """The tree state cannot be used as it is."""
