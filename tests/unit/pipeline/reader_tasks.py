"""A read task's ``then`` for the reader tests: light to import, as a reader unpickles it."""

from __future__ import annotations

import os

from ingestor.read.documents import Document


def source_of(doc: Document) -> str:
    """The document's source."""
    return doc.source


def reader_pid(doc: Document) -> int:
    """The process that read it."""
    return os.getpid()
