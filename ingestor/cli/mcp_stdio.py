"""The runner of ``adrap mcp``: the tree's MCP tools over stdio, for an agent that starts adrap itself.

Each tool call opens the store for that call only (the embedded store under the shared reader
lock), so an ``adrap watch`` may start while an agent keeps this server running. While a daemon
owns the embedded store, calls are forwarded to its ``/mcp`` endpoint (with the daemon's token),
as ``adrap query`` asks the daemon.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from ingestor.cli.factories import (
    make_change_feed,
    make_embedder,
    make_query_service,
    reading_store,
)
from ingestor.config import Settings
from ingestor.service.mcp_http import MCP_PATH
from ingestor.service.mcp_server import LocalRunner, TreeTools
from retriever import Embedder

if TYPE_CHECKING:
    from ingestor.cli.daemon_client import DaemonClient

log = logging.getLogger(__name__)


class StdioRunner:
    """Runs each call on the tree in this process, or forwards it to the daemon that owns it.

    Args:
        settings: the tree's settings.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()  # one call at a time opens the store
        # Long enough for postQFRAP or an answer on a slow machine; each call is bounded anyway.
        self.local = LocalRunner(self._with_tools, timeout=600.0)

    def _with_tools(self, fn: Any) -> dict[str, Any]:
        """Open the store for one call and run ``fn`` on the tree's tools (the model stays loaded)."""
        s = self.settings
        with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(s)
            with reading_store(s) as store:
                queries = make_query_service(s, store, self._embedder)
                out: dict[str, Any] = fn(TreeTools(queries, make_change_feed(s, queries)))
                return out

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        from mcp.server.mcpserver.exceptions import ToolError

        from ingestor.service.locking import WriterActiveError

        daemon = self._daemon()
        if daemon is None:
            try:
                return await self.local.call(tool, args)
            except ToolError as exc:
                if not isinstance(exc.__cause__, WriterActiveError):
                    raise
                daemon = self._daemon()  # a daemon started meanwhile: ask it
                if daemon is None:
                    raise
        return await self._forward(daemon, tool, args)

    def _daemon(self) -> DaemonClient | None:
        """Return the daemon that owns the embedded store (its socket first), or None.

        Raises:
            ToolError: another writer (``adrap build``) holds it, or a daemon serves neither
                its socket nor HTTP.
        """
        from mcp.server.mcpserver.exceptions import ToolError

        from ingestor.cli.daemon_client import DaemonClient
        from ingestor.service.locking import read_holder

        s = self.settings
        if s.store_mode != "embedded":
            return None
        try:
            holder = read_holder(s.state_dir)
        except PermissionError:
            holder = None  # another account's tree: its daemon's socket, if any
        client = DaemonClient.find(s, holder)
        if client is None and holder is not None:
            raise ToolError(
                f"the tree's store in {s.state_dir} is in use by adrap "
                f"{holder.get('command', '?')} (pid {holder.get('pid', '?')}), which serves no "
                "socket or HTTP; retry when it has finished (or start `adrap watch`)"
            )
        return client

    async def _forward(
        self, daemon: DaemonClient, tool: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        """Call ``tool`` on the daemon's ``/mcp`` and return its structured result: over its
        Unix socket the daemon knows this user (SO_PEERCRED), over HTTP by the token."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.server.mcpserver.exceptions import ToolError

        headers = (
            {}
            if daemon.unix or daemon.token is None
            else {"Authorization": f"Bearer {daemon.token}"}
        )
        transport = httpx2.AsyncHTTPTransport(uds=daemon.where) if daemon.unix else None
        url = f"http://localhost{MCP_PATH}" if daemon.unix else f"http://{daemon.where}{MCP_PATH}"
        try:
            async with (
                httpx2.AsyncClient(
                    headers=headers, timeout=httpx2.Timeout(30.0, read=600.0), transport=transport
                ) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                result = await client.call_tool(tool, args)
        except ToolError:
            raise
        except Exception as exc:  # transport failures of every kind: one line, with the fix
            raise ToolError(
                f"the tree is owned by {daemon.who} at {daemon.url}, whose {MCP_PATH} does not "
                f"answer ({exc}); check that it runs (`adrap status`) and its "
                "ADRAP_WATCH__HTTP_TOKEN"
            ) from exc
        if result.is_error:  # the daemon's message, without the SDK's prefix (ours adds it)
            text = " ".join(getattr(c, "text", "") for c in result.content).strip()
            raise ToolError(text.removeprefix(f"Error executing tool {tool}: "))
        out: dict[str, Any] = result.structured_content
        return out
