"""The daemon's own HTTP routes: health, readiness, metrics, status, queries and answers, the
retry and confirm actions, and the MCP endpoint. They are given the few services of the daemon
they use (:class:`Served`), not the daemon; :mod:`ingestor.service.http` serves them."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from ingestor.errors import SummarizationError
from ingestor.read.access_classes import UNRESTRICTED, Identity
from ingestor.service.http import HttpLimits, caller_of, error_response, run_bounded
from ingestor.service.mcp_http import MCP_PATH, mcp_endpoint
from retriever import RetrieverError

__all__ = ["Served", "daemon_routes"]


class Served(Protocol):
    """What the daemon's routes read of the daemon (:class:`~ingestor.service.daemon.Daemon`)."""

    @property
    def ready(self) -> bool:
        """The first reconciliation is done: queries are answered."""

    @property
    def registry(self) -> Any:
        """The Prometheus registry of ``/metrics``."""

    @property
    def queries(self) -> Any:
        """The query service (``/query``, ``/ask``, MCP)."""

    @property
    def feed(self) -> Any:
        """The change log's reader (``/changes``, MCP)."""

    def share_problem(self) -> str | None:
        """Why the watched folder is not there now (None: it is)."""

    def status(
        self, *, offset: int = 0, limit: int = 100, caller: Identity = UNRESTRICTED
    ) -> dict[str, Any]: ...

    def query(self, params: dict[str, str], caller: Identity = UNRESTRICTED) -> dict[str, Any]: ...

    def ask(self, params: dict[str, str], caller: Identity = UNRESTRICTED) -> dict[str, Any]: ...

    def changes(
        self, params: dict[str, str], caller: Identity = UNRESTRICTED
    ) -> dict[str, Any]: ...

    def retry(self, path: str | None = None) -> list[str]: ...

    def confirm_deletions(self) -> None: ...

    def refresh(self, rewrite: bool = False) -> dict[str, Any]: ...

    def repair_now(self, every: bool = False) -> dict[str, Any]: ...


def daemon_routes(daemon: Served, limits: HttpLimits) -> list[BaseRoute]:
    """Return the daemon's own routes."""

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(_: Request) -> Response:
        if daemon.ready:
            # Queries are answered from the kept tree while the share is away: still ready.
            problem = daemon.share_problem()
            return PlainTextResponse("ready\n" if problem is None else f"ready; {problem}\n")
        return PlainTextResponse("reconciling\n", status_code=503)

    async def metrics(_: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = await anyio.to_thread.run_sync(generate_latest, daemon.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def status(request: Request) -> Response:
        try:  # ?offset=N&limit=M pages the skipped and stale files
            offset = int(request.query_params.get("offset", "0"))
            limit = int(request.query_params.get("limit", "100"))
            if offset < 0 or not 0 <= limit <= 1000:
                raise ValueError
        except ValueError:
            return error_response(400, "offset must be an integer >= 0 and limit one in 0..1000")
        out = await anyio.to_thread.run_sync(
            partial(daemon.status, offset=offset, limit=limit, caller=caller_of(request.scope))
        )
        return Response(json.dumps(out, ensure_ascii=False), media_type="application/json")

    def answering(fn: Callable[[dict[str, str], Identity], dict[str, Any]]) -> Any:
        async def route(request: Request) -> Response:
            if not daemon.ready:
                return error_response(503, "reconciling; retry shortly")
            params = dict(request.query_params)  # bounded by the query service's settings
            return await _run(partial(fn, params, caller_of(request.scope)), limits.query_timeout)

        return route

    answer_changes = answering(daemon.changes)

    async def changes(request: Request) -> Response:
        if request.method == "GET" and request.query_params.get("digest", "").lower() == "llm":
            return error_response(
                405, "digest=llm spends LLM tokens: send it as a POST (adrap changes --llm does)"
            )
        response: Response = await answer_changes(request)
        return response

    async def retry(request: Request) -> Response:
        if (refused := _owner_only(request)) is not None:
            return refused
        path = request.query_params.get("path") or None
        released = await anyio.to_thread.run_sync(daemon.retry, path)
        return JSONResponse({"released": released})

    async def refresh(request: Request) -> Response:  # spends LLM tokens: POST, behind the token
        if (refused := _owner_only(request)) is not None:
            return refused
        rewrite = request.query_params.get("rewrite", "").lower() in ("1", "true", "yes")
        try:
            out = await anyio.to_thread.run_sync(daemon.refresh, rewrite)
        except ValueError as exc:
            return error_response(503, str(exc))
        return JSONResponse(out)

    async def repair(request: Request) -> Response:  # spends LLM tokens: POST, behind the token
        if (refused := _owner_only(request)) is not None:
            return refused
        every = request.query_params.get("all", "").lower() in ("1", "true", "yes")
        try:
            out = await anyio.to_thread.run_sync(daemon.repair_now, every)
        except ValueError as exc:
            return error_response(503, str(exc))
        return JSONResponse(out)

    async def confirm(request: Request) -> Response:
        if (refused := _owner_only(request)) is not None:
            return refused
        await anyio.to_thread.run_sync(daemon.confirm_deletions)
        return JSONResponse({"confirmed": True})

    return [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        Route("/status", status),
        Route("/query", answering(daemon.query)),
        Route("/ask", answering(daemon.ask), methods=["POST"]),  # spends LLM tokens
        Route("/changes", changes, methods=["GET", "POST"]),
        Route("/retry", retry, methods=["POST"]),
        Route("/confirm-deletions", confirm, methods=["POST"]),
        Route("/refresh", refresh, methods=["POST"]),
        Route("/repair", repair, methods=["POST"]),
        Route(
            MCP_PATH,
            mcp_endpoint(
                lambda: daemon.queries,
                changes=lambda: daemon.feed,
                ready=lambda: daemon.ready,
                timeout=limits.query_timeout,
                max_tokens=limits.max_tokens,
                max_top_k=limits.max_top_k,
            ),
            methods=["GET", "POST", "DELETE"],
        ),
    ]


def _owner_only(request: Request) -> Response | None:
    """Refuse an action of the tree's owner (retry, confirm, refresh) to anyone else (403)."""
    caller = caller_of(request.scope)
    if caller.unrestricted:
        return None
    return error_response(
        403,
        f"{request.url.path} is the tree owner's action and the caller is {caller.name}; run "
        "it as the daemon's account (`adrap` over its socket) or with the owner's token",
    )


async def _run(fn: Callable[[], dict[str, Any]], timeout: float) -> Response:
    """Run a blocking answer in a worker thread; 400/503/504 for bad input, store, timeout."""
    try:
        out = await run_bounded(fn, timeout)
    except TimeoutError:
        return error_response(504, f"the query took longer than {timeout:.0f} s")
    except ValueError as exc:
        return error_response(400, str(exc))
    except SummarizationError as exc:  # the LLM failed: no partial answer
        return error_response(502, str(exc))
    except RetrieverError as exc:
        return error_response(503, str(exc))
    return Response(json.dumps(out, ensure_ascii=False), media_type="application/json")
