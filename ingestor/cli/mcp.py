"""``adrap mcp``: the tree's MCP tools over stdio (:mod:`ingestor.cli.mcp_stdio`), imported only
when the command runs, so ``adrap --help`` stays light."""

from __future__ import annotations

import click

from ingestor.cli.app import Ctx, main, run, tree_options


@main.command(name="mcp")
@tree_options()
@click.pass_obj
def mcp_command(ctx: Ctx) -> None:
    """Serve the tree to an MCP client (an agent) over stdio.

    Tools: search (collapsed, traversal or postqfrap, with source and layer filters), read_node
    (a node with its parents and children) and, with an LLM configured, ask. Every hit carries
    its node id, file, span, section or locator, layer and score. While `adrap watch` owns the
    tree, calls go to its /mcp endpoint (streamable HTTP, the same tools).

    \b
    Example: an MCP client's configuration
      {"mcpServers": {"adrap": {"command": "adrap", "args": ["mcp"],
                                "env": {"ADRAP_STATE_DIR": "/home/me/.adrap"}}}}
    """

    def body() -> None:
        s = ctx.settings
        from ingestor.cli.daemon_client import DaemonClient
        from ingestor.cli.factories import require_built
        from ingestor.cli.mcp_stdio import StdioRunner
        from ingestor.service.mcp_server import build_server

        if DaemonClient.find(s) is None:  # another account's tree is reached by its socket
            require_built(s)  # at once, before any client connects: "not built" says what to run
        server = build_server(StdioRunner(s), with_ask=s.summary.backend == "openai")
        server.run("stdio")

    run(ctx, body)
