"""MCP's streamable HTTP transport at ``/mcp`` on the daemon's port (tools: :mod:`.mcp_server`).

Mounted by :func:`ingestor.service.daemon.routes.daemon_routes`, so the daemon's door (Host and
cross-site checks) and bearer token guard it like every other route. Stateless (a fresh
transport per POST, JSON replies): nothing is kept between requests, so a client never needs a
sticky session, and no session table can grow.

Who may read what (issue 53): the server is built once, for every caller; each request's caller
(``caller_of``, as the door identified it) is set in :data:`MCP_CALLER` around the SDK's
handling of the request, and a tool reads it in its own task. That task inherits the request's
context: the SDK starts a stateless request's server task from the request's task (anyio's
``TaskGroup.start`` creates it in the current context) and each tool call from there;
tests/unit/service/test_reader_doors.py checks that two callers interleaved each get their own.
Outside a request the variable says anonymous, never the owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Final

from ingestor.answer.changes import ChangeFeed
from ingestor.answer.service import QueryService
from ingestor.read.access_classes import ANONYMOUS, Identity
from ingestor.service.mcp_server import LocalRunner, TreeTools, build_server

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)

#: Where the daemon serves MCP's streamable HTTP transport.
MCP_PATH: Final = "/mcp"
#: The caller of the request being handled (set by :class:`McpEndpoint` for each request).
MCP_CALLER: ContextVar[Identity] = ContextVar("adrap_mcp_caller", default=ANONYMOUS)


class McpEndpoint:
    """The streamable HTTP transport (an ASGI app), built and started on its first request.

    The SDK's session manager runs a task group for the transport's lifetime, normally entered in
    the app's lifespan; the daemon's server runs without one (and most daemons are never asked
    over MCP), so the first request starts it as a task of the server's event loop, which
    cancels it when the server stops.

    Args:
        make_server: builds the MCP server (called once, on the first request).
    """

    def __init__(self, make_server: Callable[[], MCPServer]) -> None:
        self.make_server = make_server
        self._started: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._handle: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self._failed = ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._started is None:
            self._started = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._serve(self._started))
        await self._started.wait()
        if self._handle is None:
            from starlette.responses import JSONResponse

            await JSONResponse({"error": self._failed}, status_code=503)(scope, receive, send)
            return
        from ingestor.service.http import caller_of

        token = MCP_CALLER.set(caller_of(scope))
        try:
            await self._handle(scope, receive, send)
        finally:
            MCP_CALLER.reset(token)

    async def _serve(self, started: asyncio.Event) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        from ingestor.service.http import MAX_BODY

        try:
            server = self.make_server()
            server.streamable_http_app(
                stateless_http=True,
                json_response=True,
                max_request_body_size=MAX_BODY,
                # The daemon's door checks Host and Origin on every route, with its allowed
                # hosts (a proxy's name); the SDK's own check knows only loopback names.
                transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            )
            manager = server.session_manager
        except Exception as exc:  # a bad configuration: say so on every request, keep serving
            log.exception("cannot serve MCP at %s", MCP_PATH)
            self._failed = f"the MCP endpoint could not start: {exc}"
            started.set()
            return
        async with manager.run():
            self._handle = manager.handle_request
            started.set()
            await asyncio.Event().wait()  # until the server's loop cancels this task


def mcp_endpoint(
    queries: Callable[[], QueryService],
    *,
    changes: Callable[[], ChangeFeed] | None = None,
    ready: Callable[[], bool],
    timeout: float,
    max_tokens: int,
    max_top_k: int,
) -> McpEndpoint:
    """Return the daemon's ``/mcp`` endpoint over its query service.

    Args:
        queries: returns the daemon's query service (read on the first request).
        changes: returns the daemon's change log reader (the ``changes`` tool).
        ready: False while the daemon reconciles.
        timeout: seconds a tool call may take.
        max_tokens: the largest budget a call may ask for (the HTTP API's bound).
        max_top_k: the largest ``top_k``.
    """

    def make() -> MCPServer:
        service = queries()
        tools = TreeTools(service, changes() if changes is not None else None)
        runner = LocalRunner(
            lambda fn: fn(tools), timeout=timeout, ready=ready, caller=MCP_CALLER.get
        )
        return build_server(
            runner,
            with_ask=service.llm is not None,
            max_tokens=max_tokens,
            max_top_k=max_top_k,
        )

    return McpEndpoint(make)
