"""Paged, read-only views of one tree in the node store: what the dashboard shows, as JSON.

Why the node store and not the tree state: the store answers "one page of layer 3" with one
filtered scroll (payload index on ``layer``, seek to an offset id), so a page costs the page, not
the tree, at any size; the state database keys nodes by id only, so a layer listing there would
read every node. The store also holds everything a node view needs (text, sources, character
span, parents, children), and both the daemon (through its locked store, never the writer's lock)
and ``adrap explore`` (a reader of an unwatched tree) read it the same way.

Shapes (keys of nodes are the payload's, from :class:`retriever.F`):

- a *preview*: node id, layer, kind, tokens, source and span (leaves), ``n_children``,
  ``n_sources`` and ``preview`` (the first :data:`PREVIEW_CHARS` characters of the text);
- a *node*: the whole payload plus ``parents_preview`` (previews of its parents) and
  ``n_children``.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from retriever import F, NodePayload, NodeStore, SearchFilter

log = logging.getLogger(__name__)

#: Characters of a node's text in a preview (the tree view shows one line per node).
PREVIEW_CHARS: Final = 160
#: Default and largest page of a layer or of a node's children.
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 200
#: Sources listed at most in a node's view.
MAX_SOURCES: Final = 50
#: Layers probed at most when counting them (Algorithm 1 stops far below).
MAX_LAYERS: Final = 64


def preview(node: NodePayload) -> dict[str, Any]:
    """Return the one-line view of ``node`` shown in the tree and in lists."""
    return {
        F.NODE_ID: node.node_id,
        F.LAYER: node.layer,
        F.KIND: str(node.kind),
        F.N_TOKENS: node.n_tokens,
        F.SOURCE: node.source,
        F.CHAR_START: node.char_start,
        F.CHAR_END: node.char_end,
        F.SECTION: node.section,
        F.LOCATOR: node.locator,
        "n_sources": len(node.sources),
        F.SOURCES_CAPPED: node.sources_capped,
        F.STALE: node.stale,
        "n_children": len(node.children),
        "preview": node.text[:PREVIEW_CHARS],
    }


def full(node: NodePayload, parents: list[NodePayload]) -> dict[str, Any]:
    """Return the whole view of ``node``: its payload, parents as previews, children counted.

    A top summary of a big tree covers thousands of files: ``sources`` is cut to the first
    :data:`MAX_SOURCES` (``n_sources`` says how many there are) and ``source_dirs`` is left out.
    """
    out = node.to_payload() | {
        "parents_preview": [preview(p) for p in parents],
        "n_children": len(node.children),
        "n_sources": len(node.sources),
    }
    out[F.SOURCES] = list(node.sources[:MAX_SOURCES])
    del out[F.SOURCE_DIRS]
    return out


def page_limit(raw: str | None) -> int:
    """Parse a ``limit`` query parameter (default :data:`DEFAULT_PAGE`, at most :data:`MAX_PAGE`).

    Raises:
        ValueError: not an integer, or outside 1..MAX_PAGE.
    """
    if raw is None or raw == "":
        return DEFAULT_PAGE
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"limit must be an integer, not {raw!r}; use 1..{MAX_PAGE}") from None
    if not 1 <= value <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}, not {value}; page with offset")
    return value


def index_offset(raw: str | None) -> int:
    """Parse a positional ``offset`` (children pages): a non-negative integer, default 0.

    Raises:
        ValueError: not a non-negative integer.
    """
    if raw is None or raw == "":
        return 0
    if not raw.isdigit():
        raise ValueError(f"offset must be a non-negative integer, not {raw!r}")
    return int(raw)


class TreeView:
    """Read-only views of tree ``tree`` in ``store``, each costing what it returns.

    Args:
        store: the node store (the daemon passes its locked store: each call is short).
        tree: the tree shown.
    """

    def __init__(self, store: NodeStore, tree: str) -> None:
        self.store = store
        self.tree = tree

    def layers(self) -> list[dict[str, int]]:
        """Return ``[{"layer": k, "count": n}, ...]``, top layer first (one count per layer)."""
        out = []
        for layer in range(MAX_LAYERS):
            n = self.store.count(SearchFilter(tree=self.tree, min_layer=layer, max_layer=layer))
            if n == 0:
                break
            out.append({F.LAYER: layer, "count": n})
        return out[::-1]

    def layer_page(self, layer: int, limit: int, offset: str | None = None) -> dict[str, Any]:
        """Return one page of ``layer`` in id order: ``{"layer", "nodes", "next"}``.

        ``offset`` is the ``next`` of the previous page (a node id; None for the first page).

        Raises:
            ValueError: ``layer < 0``, ``limit`` outside 1..MAX_PAGE, or a malformed offset.
        """
        if layer < 0:
            raise ValueError(f"layer must be >= 0, not {layer}")
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
        flt = SearchFilter(tree=self.tree, min_layer=layer, max_layer=layer)
        try:
            nodes, after = self.store.scroll(flt, limit, offset)
        except ValueError as exc:
            raise ValueError(
                f"offset {offset!r} is not a node id ({exc}); use the previous page's next"
            ) from exc
        return {F.LAYER: layer, "nodes": [preview(n) for n in nodes], "next": after}

    def get(self, node_id: str) -> NodePayload | None:
        """Return the node ``node_id`` of this tree, or None (unknown, malformed, other tree)."""
        try:
            found = self.store.retrieve([node_id])
        except ValueError:  # not a uuid: no such node
            return None
        if not found or found[0].tree != self.tree:
            return None
        return found[0]

    def node(self, node_id: str) -> dict[str, Any] | None:
        """Return the whole view of a node (see :func:`full`), or None if there is none."""
        node = self.get(node_id)
        if node is None:
            return None
        return full(node, self.store.retrieve(list(node.parents)) if node.parents else [])

    def children(self, node_id: str, offset: int, limit: int) -> dict[str, Any] | None:
        """Return previews of ``limit`` children of a node from position ``offset``, or None.

        ``{"node_id", "total", "offset", "nodes", "next"}``; ``next`` is the next page's offset
        or None.

        Raises:
            ValueError: ``offset < 0`` or ``limit`` outside 1..MAX_PAGE.
        """
        if offset < 0 or not 1 <= limit <= MAX_PAGE:
            raise ValueError(
                f"children pages need offset >= 0 and limit 1..{MAX_PAGE}, not {offset}, {limit}"
            )
        node = self.get(node_id)
        if node is None:
            return None
        ids = list(node.children[offset : offset + limit])
        end = offset + len(ids)
        return {
            F.NODE_ID: node.node_id,
            "total": len(node.children),
            "offset": offset,
            "nodes": [preview(c) for c in self.store.retrieve(ids)] if ids else [],
            "next": end if end < len(node.children) else None,
        }
