"""The ``adrap`` command: one module per command group, each registering on :data:`main`.

Settings, logging (``app``) and every client (``factories``) are built here and only here.
"""

from ingestor.cli import (  # noqa: F401  (registers the commands)
    ask,
    build,
    changes,
    control,
    explore,
    inspect,
    mcp,
    query,
    tokens,
    watch,
)
from ingestor.cli.app import main

__all__ = ["main"]
