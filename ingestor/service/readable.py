"""Who may read what at the doors that read the store themselves (issue 53).

``/query``, ``/ask`` and MCP go through :meth:`~ingestor.answer.service.QueryService.reader_filter`;
the Qdrant facade (:mod:`ingestor.service.qdrant_rest`) and the dashboard's API
(:mod:`ingestor.service.dashboard.routes`) read the store directly, so they are given a
:data:`Readable`: the caller (``caller_of(request.scope)``) -> the access classes it may read,
which the daemon takes from its class registry (``ClassRegistry.readable``). Without one they
serve the tree's owner alone (:func:`owner_only`): a door left unwired shows nothing to anybody
else, never everything.
"""

from __future__ import annotations

from collections.abc import Callable

from ingestor.read.access_classes import Identity

__all__ = ["Readable", "owner_only"]

#: The access classes a caller may read; None: every one (an unrestricted caller).
Readable = Callable[[Identity], tuple[str, ...] | None]


def owner_only(caller: Identity) -> tuple[str, ...] | None:
    """The default :data:`Readable`: everything for the tree's owner, nothing for anyone else."""
    return None if caller.unrestricted else ()
