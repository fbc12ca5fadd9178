"""The tree as MCP tools for agents (the official ``mcp`` SDK): search, read a node, ask.

Two transports serve the same tools: stdio (``adrap mcp``, see :mod:`ingestor.cli.mcp`) and
streamable HTTP at ``/mcp`` on the daemon's port (:mod:`ingestor.service.mcp_http`, mounted by
:func:`ingestor.service.daemon.routes.daemon_routes`), where the daemon's door (Host and cross-site
checks) and bearer token guard it like every other route.

Tools (every hit carries its node id, file, span, section/locator where known, layer and score,
so an agent can cite it):

- ``search``: collapsed-tree, traversal or postQFRAP retrieval (the modes of ``adrap query``;
  hybrid dense + BM25 where the store has sparse vectors), with source and layer filters.
- ``read_node``: one node's text with its parents and children (ids, places and a preview), to
  walk the tree up to the summaries or down to the leaves.
- ``ask``: an answer with numbered citations; only listed when an LLM is configured (the
  server's instructions say how to configure one otherwise).

Who may read what (issue 53): every tool runs as a caller (:class:`LocalRunner`'s ``caller``):
at ``/mcp`` the request's (:mod:`ingestor.service.mcp_http`), over stdio with a local store the
account that could open the state dir. ``search`` and ``ask`` filter as ``/query`` does;
``read_node`` finds only a node the caller may read, and lists only the parents and children it
may read (a hidden neighbour is left out, as if it were not there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final, Protocol

from pydantic import Field

from ingestor.answer.changes import ChangeFeed
from ingestor.answer.modes import MODES
from ingestor.answer.service import LIMITS, QueryService
from ingestor.errors import IngestError
from ingestor.read.access_classes import UNRESTRICTED, Identity
from retriever import F, NodePayload, RetrieverError, ScoredNode, SearchFilter

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

log = logging.getLogger(__name__)

#: Characters of a parent's or child's text shown by ``read_node`` (read it by id for all).
PREVIEW_CHARS: Final = 200
NAME: Final = "adrap"


def cite(node: NodePayload) -> dict[str, Any]:
    """Return where ``node`` is, for an agent to cite: id, file(s), span, section, locator,
    layer (keys left out where unknown). A summary lists its files unless they were capped."""
    out: dict[str, Any] = {F.NODE_ID: node.node_id, **node.citation()}
    if node.layer > 0 and node.sources:
        out[F.SOURCES] = list(node.sources)
    return out


def node_json(node: NodePayload) -> dict[str, Any]:
    """Return a node: its place (:func:`cite`), token count and text."""
    return cite(node) | {F.N_TOKENS: node.n_tokens, F.TEXT: node.text}


def hit_json(hit: ScoredNode) -> dict[str, Any]:
    """Return one search hit: :func:`node_json` and its score."""
    return node_json(hit.node) | {"score": round(hit.score, 6)}


def _preview(node: NodePayload) -> dict[str, Any]:
    text = node.text if len(node.text) <= PREVIEW_CHARS else node.text[:PREVIEW_CHARS] + "…"
    return cite(node) | {F.N_TOKENS: node.n_tokens, "preview": text}


def _request(args: Mapping[str, object], question: str) -> dict[str, object]:
    """Return the ``/query`` parameters of a tool's arguments (``question`` names ``q``)."""
    return {("q" if k == question else k): v for k, v in args.items() if k != "node_id"}


class TreeTools:
    """The tools' work on one tree, blocking (callers run it in a worker thread), each call as
    ``caller`` (default: the tree's owner, for a store opened locally).

    Args:
        queries: the query service of the tree (its store, embedder, lock and LLM).
        changes: reads the tree's change log (None: the ``changes`` tool finds no record).
    """

    def __init__(self, queries: QueryService, changes: ChangeFeed | None = None) -> None:
        self.queries = queries
        self.feed = changes if changes is not None else ChangeFeed.over(lambda: None, queries)

    def changes(
        self, args: Mapping[str, object], caller: Identity = UNRESTRICTED
    ) -> dict[str, Any]:
        """Return what changed in the folder, as ``caller`` may see it (``args``: since, until,
        limit, digest; see :meth:`~ingestor.answer.changes.ChangeFeed.changes`).

        Raises:
            ValueError: a bad parameter.
        """
        params = {k: v for k, v in args.items() if v is not None}
        if params.pop("digest", False):
            params["digest"] = "1"
        return self.feed.changes(params, caller)

    def search(self, args: Mapping[str, object], caller: Identity = UNRESTRICTED) -> dict[str, Any]:
        """Return the hits of a ``search`` call (``args``: the tool's arguments).

        Raises:
            ValueError: a bad parameter.
            RetrieverError, SummarizationError: the store / postQFRAP's summariser failed.
        """
        req = self.queries.parse(_request(args, "query"), caller)
        ctx = self.queries.context(req)
        out: dict[str, Any] = {
            "question": req.question,
            "mode": req.mode,
            "max_tokens": req.max_tokens,
            "total_tokens": sum(h.node.n_tokens for h in ctx.hits),
            "hits": [hit_json(h) for h in ctx.hits],
        }
        if ctx.qf is not None:  # postQFRAP: the context is its parts, each with its spans
            out["total_tokens"] = ctx.qf.n_tokens
            out["parts"] = [p.to_json() for p in ctx.qf.parts]
        elif not ctx.hits:  # an agent is told why, and what to ask for instead
            out["note"] = self.queries.why_empty(req)
        return out

    def ask(self, args: Mapping[str, object], caller: Identity = UNRESTRICTED) -> dict[str, Any]:
        """Return the answer of an ``ask`` call: text, citations ``[n]`` -> files and spans.

        Raises:
            ValueError, RetrieverError, SummarizationError: as :meth:`QueryService.ask`.
        """
        out = self.queries.ask(_request(args, "question"), caller)
        keep = ("question", "mode", "answered", "answer", "reason", "citations", "parts", "model")
        return {k: out[k] for k in keep if k in out}

    def read_node(self, node_id: str, caller: Identity = UNRESTRICTED) -> dict[str, Any]:
        """Return a node of this tree with its parents and children (previews), those that
        ``caller`` may read.

        Raises:
            ValueError: ``node_id`` is not a node id, or no node of this tree that the caller may
                read has it (the same message: a hidden node is not found).
        """
        tree = self.queries.tree
        found = self._readable([node_id], caller)
        if not found:  # the tree filter also keeps the reserved meta point out
            raise ValueError(
                f"no node {node_id!r} in tree {tree!r}; use a node_id from a search hit"
            )
        node = found[0]
        parents = self._readable(list(node.parents), caller)
        children = self._readable(list(node.children), caller)
        return {
            "node": node_json(node),
            "parents": [_preview(p) for p in parents],
            "children": [_preview(c) for c in children],
        }

    def _readable(self, ids: list[str], caller: Identity) -> list[NodePayload]:
        """Return the nodes of ``ids`` in this tree that ``caller`` may read, in ``ids``' order
        (one scroll under the reader filter, the same as every door's)."""
        if not ids:
            return []
        flt = self.queries.reader_filter(
            SearchFilter(tree=self.queries.tree, ids=tuple(ids)), caller
        )
        nodes, _ = self.queries.store.scroll(flt, len(ids))
        by_id = {n.node_id: n for n in nodes}
        return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]


class ToolRunner(Protocol):
    """Runs a tool by name: in this process, or by forwarding it to the daemon that owns the tree."""

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Return the tool's structured result.

        Raises:
            ToolError: the tool failed (the message names the value and the fix).
        """
        ...


class LocalRunner:
    """Runs tools on a :class:`TreeTools` in a worker thread, under a deadline.

    Args:
        tools: returns the tools to use for one call (opening the store if need be), and runs
            the call on them: ``tools(fn)`` -> ``fn(TreeTools)``.
        timeout: seconds a call may take (its work stops then too; see ``run_bounded``).
        ready: False while the daemon reconciles (calls are refused, to retry shortly).
        caller: who makes the call, read in the call's own task before its work starts (at
            ``/mcp``: the request's caller, from a context variable); default the tree's owner,
            for a store the OS let this account open.
    """

    def __init__(
        self,
        tools: Callable[[Callable[[TreeTools], dict[str, Any]]], dict[str, Any]],
        *,
        timeout: float,
        ready: Callable[[], bool] = lambda: True,
        caller: Callable[[], Identity] = lambda: UNRESTRICTED,
    ) -> None:
        self.tools = tools
        self.timeout = timeout
        self.ready = ready
        self.caller = caller

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        from mcp.server.mcpserver.exceptions import ToolError

        from ingestor.service.http import run_bounded

        if not self.ready():
            raise ToolError("adrap is reconciling the tree with its folder; retry shortly")
        who = self.caller()  # here, in the call's task: its context holds the request's caller

        def work(t: TreeTools) -> dict[str, Any]:
            if tool == "read_node":
                return t.read_node(str(args[F.NODE_ID]), who)
            if tool == "changes":
                return t.changes(args, who)
            return t.ask(args, who) if tool == "ask" else t.search(args, who)

        try:
            return await run_bounded(lambda: self.tools(work), self.timeout)
        except TimeoutError:
            raise ToolError(
                f"{tool} took longer than {self.timeout:.0f} s; ask for fewer tokens "
                "(max_tokens) or narrow it with source / layers"
            ) from None
        except (ValueError, RetrieverError, IngestError) as exc:  # SummarizationError too
            raise ToolError(str(exc)) from exc


# -- the server --------------------------------------------------------------------------------

#: What the server says instead of listing ``ask`` when no LLM is configured.
NO_ASK: Final = (
    " No `ask` tool: no LLM is configured for this tree; set ADRAP_SUMMARY__BACKEND=openai and "
    "ADRAP_SUMMARY__OPENAI__BASE_URL (any OpenAI-compatible server) and restart adrap to get it."
)


#: The tools' arguments (module level: the SDK reads the annotations to build each schema).
Question = Annotated[str, Field(min_length=1, description="What to look for, or the question.")]
Budget = Annotated[int | None, Field(ge=1, description="Context budget in tokens.")]
Mode = Annotated[
    str | None,
    Field(
        description="collapsed: one search over every layer (default); traversal: top_k per "
        "layer from the top down; postqfrap: leaves summarised around the question.",
        json_schema_extra={"enum": list(MODES)},
    ),
]
Source = Annotated[
    str | None,
    Field(
        description="Only this file, or this folder when it ends in '/', relative to the tree's "
        "root (as in a hit's source)."
    ),
]
Layer = Annotated[int | None, Field(ge=0, description="Layer bound (0 = leaves).")]
TopK = Annotated[int | None, Field(ge=1, description="traversal: nodes per layer.")]
NodeId = Annotated[str, Field(description="A node_id from a search hit.")]
Since = Annotated[
    str | None,
    Field(
        description="How far back: a duration (90m, 36h, 2d, 1w), a day (today, yesterday, "
        "monday: from its midnight), an ISO date or date-time (2026-11-23T09:00), or epoch "
        "seconds; default 7d."
    ),
]
Limit = Annotated[int | None, Field(ge=1, le=1000, description="Records at most (default 50).")]
Digest = Annotated[
    bool,
    Field(
        description="Also return the summaries those changes regenerated (what the changed "
        "parts of the folder are about now), numbered for citation."
    ),
]


def build_server(
    runner: ToolRunner,
    *,
    with_ask: bool,
    max_tokens: int = LIMITS["max_tokens"],
    max_top_k: int = LIMITS["top_k"],
) -> MCPServer:
    """Return the MCP server of one tree, its tools calling ``runner``.

    Args:
        runner: runs each call.
        with_ask: list the ``ask`` tool (an LLM is configured).
        max_tokens: the largest ``max_tokens`` a call may ask for.
        max_top_k: the largest ``top_k``.
    """
    from mcp.server.mcpserver import MCPServer

    instructions = (
        "Search a folder of documents kept as a RAPTOR tree: leaves (layer 0) are chunks of the "
        "files, each layer above summarises clusters of the one below. `search` returns nodes "
        "with node_id, source (file), char_start/char_end (span), section, locator, layer and "
        "score: cite them. `read_node` walks from a hit to its parents (broader summaries) or "
        "children (details, down to the leaves). `changes` tells what changed in the folder "
        "since a time (files, and the summaries regenerated)."
    )
    instructions += " `ask` answers with numbered citations." if with_ask else NO_ASK
    server: MCPServer = MCPServer(NAME, instructions=instructions)

    def params(**kw: Any) -> dict[str, Any]:
        """The arguments given (None: left out), within the server's bounds."""
        from mcp.server.mcpserver.exceptions import ToolError

        for name, most in (("max_tokens", max_tokens), ("top_k", max_top_k)):
            if (kw.get(name) or 0) > most:
                raise ToolError(f"{name} must be at most {most}, not {kw[name]}")
        return {k: v for k, v in kw.items() if v is not None}

    async def search(
        query: Question,
        mode: Mode = None,
        max_tokens: Budget = None,
        top_k: TopK = None,
        source: Source = None,
        min_layer: Layer = None,
        max_layer: Layer = None,
    ) -> dict[str, Any]:
        """Search the tree: the nodes whose text best matches the query, within a token budget."""
        return await runner.call(
            "search",
            params(
                query=query,
                mode=mode,
                max_tokens=max_tokens,
                top_k=top_k,
                source=source,
                min_layer=min_layer,
                max_layer=max_layer,
            ),
        )

    async def read_node(
        node_id: NodeId,
    ) -> dict[str, Any]:
        """Read one node in full, with its parents and children (previews; read them by id)."""
        return await runner.call("read_node", {"node_id": node_id})

    async def changes(
        since: Since = None,
        limit: Limit = None,
        digest: Digest = False,
    ) -> dict[str, Any]:
        """What changed in the folder: files added, edited, removed, moved or given new permissions,
        and the summaries regenerated, newest first (only what the caller may read)."""
        return await runner.call("changes", params(since=since, limit=limit, digest=digest))

    async def ask(
        question: Question,
        mode: Mode = None,
        max_tokens: Budget = None,
        source: Source = None,
        min_layer: Layer = None,
        max_layer: Layer = None,
    ) -> dict[str, Any]:
        """Answer a question from the tree with the configured LLM, citing sources as [n]."""
        return await runner.call(
            "ask",
            params(
                question=question,
                mode=mode,
                max_tokens=max_tokens,
                source=source,
                min_layer=min_layer,
                max_layer=max_layer,
            ),
        )

    from mcp.types import ToolAnnotations

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    server.add_tool(search, annotations=read_only)
    server.add_tool(read_node, annotations=read_only)
    server.add_tool(changes, annotations=read_only)
    if with_ask:
        server.add_tool(ask, annotations=ToolAnnotations(read_only_hint=True))
    return server
