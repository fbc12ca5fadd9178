"""Errors raised by models_store.

ModelStoreError
├── IncompatibleModelError   written by other library versions or for another setup: refit
└── CorruptModelError        a file is missing or its checksum does not match
"""


class ModelStoreError(Exception):
    """Base of every models_store error."""


class IncompatibleModelError(ModelStoreError):
    """The stored object cannot be used by this process; the message says how to rebuild."""


class CorruptModelError(ModelStoreError):
    """The stored object is damaged (missing file, checksum mismatch)."""
