"""The ``adrap`` command: one module per command group, each registering on :data:`main`.

Settings, logging (``app``) and every client (``factories``) are built here and only here.
"""

from ingestor.cli import ask, build, inspect, query, watch  # noqa: F401  (registers the commands)
from ingestor.cli.app import main

__all__ = ["main"]
