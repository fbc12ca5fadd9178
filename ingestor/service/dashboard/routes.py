"""The daemon's ``/dashboard`` page and its JSON endpoints (mounted beside the daemon's routes).

- ``GET /dashboard``: the page (no token needed: it is the same static document for everyone and
  holds no tree data; see docs/dashboard.md for how the page then authenticates).
- ``GET /dashboard/api/layers``: ``{"tree", "layers": [{"layer", "count"}, ...]}``, top first.
- ``GET /dashboard/api/layer/{n}?offset=ID&limit=N``: one page of layer ``n`` in id order;
  ``offset`` is the previous page's ``next``.
- ``GET /dashboard/api/node/{id}``: the node (payload, parents previewed, children counted).
- ``GET /dashboard/api/children/{id}?offset=I&limit=N``: previews of a page of its children.
- ``GET /dashboard/api/updates``: the ``/status`` document plus the last updates, newest first.

Searching uses the daemon's own ``/query`` (the JSON of ``adrap query --json``), so the page
highlights exactly what a query returns. ``limit`` is at most ``view.MAX_PAGE`` (400 beyond);
unknown or malformed node ids are 404; every endpoint but the page needs the bearer token.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ingestor.service.dashboard.page import render_page
from ingestor.service.dashboard.view import TreeView, index_offset, page_limit
from retriever import F, RetrieverError

#: The page's path (served without the token, like /healthz: it carries no data).
PAGE_PATH = "/dashboard"


def _error(code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=code)


def _json(out: Any) -> Response:
    return Response(json.dumps(out, ensure_ascii=False), media_type="application/json")


def dashboard_routes(
    view: TreeView,
    updates: Callable[[], dict[str, Any]],
    ready: Callable[[], bool] = lambda: True,
) -> list[BaseRoute]:
    """Return the dashboard's routes over ``view``.

    Args:
        view: the tree's paged views (over the daemon's locked store).
        updates: returns the ``/dashboard/api/updates`` document.
        ready: False while the daemon reconciles (the API answers 503 meanwhile).
    """

    async def call(fn: Callable[[], Any], missing: str | None = None) -> Response:
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
        return _json(out)

    async def page(_: Request) -> Response:
        return HTMLResponse(render_page(), headers={"Cache-Control": "no-cache"})

    async def layers(_: Request) -> Response:
        return await call(lambda: {F.TREE: view.tree, "layers": view.layers()})

    async def layer(request: Request) -> Response:
        q = request.query_params
        try:
            limit = page_limit(q.get("limit"))
        except ValueError as exc:
            return _error(400, str(exc))
        n: int = request.path_params["n"]
        return await call(partial(view.layer_page, n, limit, q.get("offset") or None))

    async def node(request: Request) -> Response:
        node_id: str = request.path_params["id"]
        return await call(partial(view.node, node_id), node_id)

    async def children(request: Request) -> Response:
        q = request.query_params
        try:
            limit, offset = page_limit(q.get("limit")), index_offset(q.get("offset"))
        except ValueError as exc:
            return _error(400, str(exc))
        node_id: str = request.path_params["id"]
        return await call(partial(view.children, node_id, offset, limit), node_id)

    async def recent(_: Request) -> Response:
        out = await anyio.to_thread.run_sync(updates)
        return _json(out)

    return [
        Route(PAGE_PATH, page),
        Route("/dashboard/api/layers", layers),
        Route("/dashboard/api/layer/{n:int}", layer),
        Route("/dashboard/api/node/{id}", node),
        Route("/dashboard/api/children/{id}", children),
        Route("/dashboard/api/updates", recent),
    ]
