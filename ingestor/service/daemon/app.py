"""The daemon's HTTP app: its own routes (:mod:`ingestor.service.daemon.routes`), the dashboard's
and Qdrant's read-only REST API over the tree's store (embedded or a server's collection), behind
the door and the token, each caller reading what it may."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette

from ingestor.read.access_classes import ClassRegistry, Identity
from ingestor.service.concurrency import LockedShard, LockedStore
from ingestor.service.daemon.routes import Served, daemon_routes
from ingestor.service.dashboard.routes import dashboard_routes
from ingestor.service.dashboard.view import TreeView
from ingestor.service.http import HttpLimits, HttpServer, build_app, require_token_off_loopback
from ingestor.service.identity import Callers
from ingestor.service.locking import StateLock
from ingestor.tree.drift import summary_drift

if TYPE_CHECKING:
    from retriever import EdgeRestReader
    from retriever.facade.server import ServerRestReader

__all__ = ["daemon_app", "facade_reader", "is_embedded", "start_server"]

log = logging.getLogger(__name__)


def is_embedded(store: LockedStore) -> bool:
    """Whether ``store`` (the daemon's locked store) is the embedded one (one process may open
    it: Qdrant clients read it through the daemon's facade only)."""
    from retriever import EdgeNodeStore

    return isinstance(store.inner, EdgeNodeStore)


def facade_reader(store: LockedStore, collection: str) -> EdgeRestReader | ServerRestReader | None:
    """Return what answers the Qdrant facade's reads over the daemon's locked ``store``: the
    embedded store's engine, or the Qdrant server's collection (its client), each with the
    reader filter of every caller; None for a store that is neither."""
    from retriever import EdgeNodeStore, EdgeRestReader, QdrantNodeStore
    from retriever.facade.server import ServerRestReader

    inner = store.inner
    if isinstance(inner, EdgeNodeStore):
        return EdgeRestReader(LockedShard(store, inner), collection)  # each call: the lock
    if isinstance(inner, QdrantNodeStore):
        return ServerRestReader(inner.client, inner.collection)
    return None


def daemon_app(
    served: Served,
    store: LockedStore,
    *,
    tree: str,
    root: Path,
    collection: str,
    limits: HttpLimits,
    token: str | None,
    host: str,
    updates: Callable[..., dict[str, Any]],
    callers: Callers | None = None,
    regenerate_at: float | None = None,
) -> Starlette:
    """Return the ASGI app over ``served`` (the daemon) and its locked ``store``; every route
    reads as its caller (``readable``: the classes the caller may read, asked per request so a
    permission change applies at once)."""

    def readable(who: Identity) -> tuple[str, ...] | None:
        classes: ClassRegistry = served.queries.classes
        return classes.readable(who)

    def drift(node_id: str) -> float | None:  # one row of the committed state, read-only
        return summary_drift(served.feed.rows(), node_id)

    view = TreeView(store, tree, drift=drift, regenerate_at=regenerate_at)
    pages = dashboard_routes(view, updates, lambda: served.ready, readable=readable)
    routes = [*daemon_routes(served, limits), *pages]
    reader = facade_reader(store, collection)
    if reader is not None:
        from ingestor.service.qdrant_rest import qdrant_routes

        routes += qdrant_routes(
            reader, root=root, limits=limits, ready=lambda: served.ready, readable=readable
        )
    return build_app(routes, token, host=host, allowed_hosts=limits.allowed_hosts, callers=callers)


def start_server(
    app: Starlette,
    host: str,
    port: int,
    limits: HttpLimits,
    token: str | None,
    *,
    lock: StateLock | None,
    collection: str,
) -> HttpServer:
    """Serve ``app`` in a thread and write its address into the writer lock (where ``adrap``
    commands find the daemon).

    Raises:
        ConfigError: binding beyond loopback without a token, or the port is taken.
    """
    require_token_off_loopback(host, token)
    server = HttpServer(app, host, port, limits)
    server.start()
    bound, at = server.address
    if lock is not None:
        lock.describe(http=f"{bound}:{at}")
    log.info(
        "serving /healthz /readyz /metrics /status /query /dashboard%s on http://%s:%d%s",
        f" and Qdrant's read API (collection {collection!r})",
        bound,
        at,
        " (bearer token required)" if token else "",
    )
    return server
