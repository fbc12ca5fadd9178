"""The daemon's ``/dashboard`` page and its JSON endpoints (mounted beside the daemon's routes).

- ``GET /dashboard``: the page (no token needed: it is the same static document for everyone and
  holds no tree data; see docs/dashboard.md for how the page then authenticates).
- ``GET /dashboard/api/layers``: ``{"tree", "layers": [{"layer", "count"}, ...]}``, top first.
- ``GET /dashboard/api/layer/{n}?offset=ID&limit=N``: one page of layer ``n`` in id order;
  ``offset`` is the previous page's ``next``.
- ``GET /dashboard/api/node/{id}``: the node (payload, parents previewed, children counted).
- ``GET /dashboard/api/children/{id}?offset=I&limit=N``: previews of a page of its children.
- ``GET /dashboard/api/updates``: the ``/status`` document plus the last updates, newest first.
- ``GET /dashboard/api/picture``: the tree as an icicle, in compact arrays
  (:mod:`~ingestor.service.dashboard.picture`), with the nodes the last update wrote marked.
- ``GET /dashboard/api/picture/map/{n}``: the 2-D map of layer ``n``
  (:mod:`~ingestor.service.dashboard.pictures`). Both are computed once per tree version (the
  daemon's last update) and sent gzipped when the client accepts it.

Searching uses the daemon's own ``/query`` (the JSON of ``adrap query --json``), so the page
highlights exactly what a query returns. ``limit`` is at most ``view.MAX_PAGE`` (400 beyond);
unknown or malformed node ids are 404; every endpoint but the page needs the bearer token.

Who may read what (issue 53): every endpoint answers as the request's caller (``caller_of``):
layers, pages, nodes, children, the picture and its maps hold only nodes the caller may read
(``readable``: the daemon's class registry), counts are of those, and a node it may not read is
404 like an unknown one. ``updates`` is the ``/status`` document as that caller gets it: for
anyone but the tree's owner, counts without file names, and no list of updates (they name files).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ingestor.service.dashboard.page import render_page
from ingestor.service.dashboard.picture import Touched
from ingestor.service.dashboard.pictures import Encoded, Pictures
from ingestor.service.dashboard.view import TreeView, index_offset, page_limit
from ingestor.service.http import caller_of
from ingestor.service.readable import Readable, owner_only
from retriever import F, RetrieverError

#: The page's path (served without the token, like /healthz: it carries no data).
PAGE_PATH = "/dashboard"


def _error(code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=code)


def _json(out: Any) -> Response:
    return Response(json.dumps(out, ensure_ascii=False), media_type="application/json")


def _encoded(request: Request, out: Encoded) -> Response:
    headers = {"Vary": "Accept-Encoding", "Cache-Control": "no-cache"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(out.gz, media_type="application/json", headers=headers)
    return Response(out.raw, media_type="application/json", headers=headers)


def _public(out: dict[str, Any]) -> dict[str, Any]:
    """The updates document for a caller who is not the owner: ``/status``'s public keys (counts,
    no file names; ``DaemonApi.status`` already keeps only those for such a caller) and no
    updates (each lists the files it changed); the change log's records stay, already cut to
    the files and summaries the caller may read."""
    from ingestor.service.identity import public_status

    return public_status(out) | {"updates": [], "changes": out.get("changes", [])}


def last_update(updates: dict[str, Any]) -> tuple[str, Touched]:
    """Return the tree's version and the nodes its last update wrote, from the updates document.

    The version is the newest update's time (``"start"`` before the daemon's first update). The
    update wrote the nodes stamped (``updated_at``) from its start to its end; nodes only
    re-linked to a new parent keep their stamp and are not marked.
    """
    ups = updates.get("updates") or []
    if not ups:
        return "start", Touched(None, "no update since the daemon started")
    up = ups[0]
    when = time.strftime("%H:%M:%S", time.localtime(up["at"]))
    note = (
        f"nodes written by the last update ({when}: files +{up.get('files_added', 0)} "
        f"~{up.get('files_changed', 0)} -{up.get('files_removed', 0)}"
        f"{f', {moved} moved' if (moved := up.get('files_moved', 0)) else ''})"
    )
    # Stamps are stored to the microsecond: the window opens one before the update started.
    started = up.get("started_at", up["at"] - up.get("seconds", 0.0))
    return f"{len(ups)}@{up['at']}", Touched(started - 1e-6, note)


def dashboard_routes(
    view: TreeView,
    updates: Callable[..., dict[str, Any]],
    ready: Callable[[], bool] = lambda: True,
    *,
    readable: Readable = owner_only,
) -> list[BaseRoute]:
    """Return the dashboard's routes over ``view``.

    Args:
        view: the tree's paged views (over the daemon's locked store).
        updates: ``updates(caller)`` returns the ``/dashboard/api/updates`` document as
            ``caller`` may see it (``DaemonApi.dashboard_updates``); ``updates()``, the owner's
            (the picture's version and the nodes the last update wrote).
        ready: False while the daemon reconciles (the API answers 503 meanwhile).
        readable: the access classes a caller may read (the daemon's class registry); by
            default the owner reads everything and anyone else nothing.
    """

    pictures = Pictures(view.store, view.tree)

    async def call(
        fn: Callable[[], Any], missing: str | None = None, request: Request | None = None
    ) -> Response:
        if not ready():
            return _error(503, "reconciling; retry shortly")
        try:
            out = await anyio.to_thread.run_sync(fn)
        except ValueError as exc:
            return _error(400, str(exc))
        except RetrieverError as exc:
            return _error(503, str(exc))
        if out is None:
            return _error(404, f"no node {missing!r} in tree {view.tree!r}; ids come from layers")
        if isinstance(out, Encoded) and request is not None:
            return _encoded(request, out)
        return _json(out)

    async def page(_: Request) -> Response:
        return HTMLResponse(render_page(), headers={"Cache-Control": "no-cache"})

    def classes(request: Request) -> tuple[str, ...] | None:
        return readable(caller_of(request.scope))

    async def layers(request: Request) -> Response:
        seen = classes(request)
        return await call(lambda: {F.TREE: view.tree, "layers": view.layers(seen)})

    async def layer(request: Request) -> Response:
        q = request.query_params
        try:
            limit = page_limit(q.get("limit"))
        except ValueError as exc:
            return _error(400, str(exc))
        n: int = request.path_params["n"]
        offset = q.get("offset") or None
        return await call(partial(view.layer_page, n, limit, offset, classes(request)))

    async def node(request: Request) -> Response:
        node_id: str = request.path_params["id"]
        return await call(partial(view.node, node_id, classes(request)), node_id)

    async def children(request: Request) -> Response:
        q = request.query_params
        try:
            limit, offset = page_limit(q.get("limit")), index_offset(q.get("offset"))
        except ValueError as exc:
            return _error(400, str(exc))
        node_id: str = request.path_params["id"]
        seen = classes(request)
        return await call(partial(view.children, node_id, offset, limit, seen), node_id)

    async def recent(request: Request) -> Response:
        caller = caller_of(request.scope)
        out = await anyio.to_thread.run_sync(partial(updates, caller))
        return _json(out if caller.unrestricted else _public(out))

    def picture(seen: tuple[str, ...] | None) -> Encoded:
        return pictures.picture(*last_update(updates()), seen)

    def layer_map(layer: int, seen: tuple[str, ...] | None) -> Encoded:
        return pictures.map(*last_update(updates()), layer, seen)

    async def picture_route(request: Request) -> Response:
        return await call(partial(picture, classes(request)), request=request)

    async def map_route(request: Request) -> Response:
        n: int = request.path_params["n"]
        return await call(partial(layer_map, n, classes(request)), request=request)

    return [
        Route(PAGE_PATH, page),
        Route("/dashboard/api/picture", picture_route),
        Route("/dashboard/api/picture/map/{n:int}", map_route),
        Route("/dashboard/api/layers", layers),
        Route("/dashboard/api/layer/{n:int}", layer),
        Route("/dashboard/api/node/{id}", node),
        Route("/dashboard/api/children/{id}", children),
        Route("/dashboard/api/updates", recent),
    ]
