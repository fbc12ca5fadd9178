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

Who may read what (issue 53): every view takes ``readable``, the access classes the caller may
read (None: everything, the tree's owner), and shows only nodes the caller may read, through the
store's one reader filter (``SearchFilter.readable``): layer counts and pages, a node (hidden:
not found), its parents (a hidden parent is left out of ``parents`` and ``parents_preview``) and
its children (a child of a node the caller may read is readable too: a summary lists the classes
of every file under it; any other is left out).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
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

#: The access classes a caller may read (None: every one, the tree's owner).
Classes = tuple[str, ...] | None


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
        drift: a summary's committed drift in tokens by node id
            (:func:`ingestor.tree.drift.summary_drift` over the state database; None: not
            shown).
        regenerate_at: the share of its children's tokens at which a summary is regenerated
            (``ADRAP_SUMMARY__MIN_CHANGE``), shown beside it.
    """

    def __init__(
        self,
        store: NodeStore,
        tree: str,
        *,
        drift: Callable[[str], float | None] | None = None,
        regenerate_at: float | None = None,
    ) -> None:
        self.store = store
        self.tree = tree
        self.drift = drift
        self.regenerate_at = regenerate_at

    def layers(self, readable: Classes = None) -> list[dict[str, int]]:
        """Return ``[{"layer": k, "count": n}, ...]``, top layer first (one count per layer),
        counting the nodes a caller who may read ``readable`` may read."""
        out = []
        for layer in range(MAX_LAYERS):
            flt = SearchFilter(tree=self.tree, min_layer=layer, max_layer=layer, readable=readable)
            n = self.store.count(flt)
            if n == 0:  # a caller who reads a summary reads the nodes under it: none above
                break
            out.append({F.LAYER: layer, "count": n})
        return out[::-1]

    def layer_page(
        self, layer: int, limit: int, offset: str | None = None, readable: Classes = None
    ) -> dict[str, Any]:
        """Return one page of ``layer`` in id order: ``{"layer", "nodes", "next"}``, of the
        nodes a caller who may read ``readable`` may read.

        ``offset`` is the ``next`` of the previous page (a node id; None for the first page).

        Raises:
            ValueError: ``layer < 0``, ``limit`` outside 1..MAX_PAGE, or a malformed offset.
        """
        if layer < 0:
            raise ValueError(f"layer must be >= 0, not {layer}")
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
        flt = SearchFilter(tree=self.tree, min_layer=layer, max_layer=layer, readable=readable)
        try:
            nodes, after = self.store.scroll(flt, limit, offset)
        except ValueError as exc:
            raise ValueError(
                f"offset {offset!r} is not a node id ({exc}); use the previous page's next"
            ) from exc
        return {F.LAYER: layer, "nodes": [preview(n) for n in nodes], "next": after}

    def get(self, node_id: str, readable: Classes = None) -> NodePayload | None:
        """Return the node ``node_id`` of this tree, or None (unknown, malformed, other tree, or
        not one a caller who may read ``readable`` may read)."""
        found = self.readable_nodes([node_id], readable)
        return found[0] if found else None

    def readable_nodes(self, ids: list[str], readable: Classes = None) -> list[NodePayload]:
        """Return the nodes of ``ids`` in this tree that a caller who may read ``readable`` may
        read, in ``ids``' order (malformed ids are none)."""
        if not ids:
            return []
        flt = SearchFilter(tree=self.tree, ids=tuple(dict.fromkeys(ids)), readable=readable)
        try:
            nodes, _ = self.store.scroll(flt, len(flt.ids or ()))
        except ValueError:  # not a uuid: no such node
            return []
        by_id = {n.node_id: n for n in nodes}
        return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]

    def node(self, node_id: str, readable: Classes = None) -> dict[str, Any] | None:
        """Return the whole view of a node (see :func:`full`), or None if there is none (or
        the caller may not read it); a parent the caller may not read is left out."""
        node = self.get(node_id, readable)
        if node is None:
            return None
        parents = self.readable_nodes(list(node.parents), readable)
        out = full(node, parents)
        want_drift = self.drift is not None and node.layer > 0
        children = (
            self.readable_nodes(list(node.children), readable)
            if readable is not None or want_drift
            else []
        )
        if readable is not None:  # no id of a node the caller may not read
            out[F.PARENTS] = [p.node_id for p in parents]
            out[F.CHILDREN] = [c.node_id for c in children]
            out["n_children"] = len(out[F.CHILDREN])
        if want_drift:
            out["drift"] = self._drift(node.node_id, sum(c.n_tokens for c in children))
        return out

    def _drift(self, node_id: str, children_tokens: int) -> dict[str, Any] | None:
        """A summary's drift: ``tokens`` its children gained, lost or had rewritten since its
        text was written, their ``share`` of its children's tokens now, ``regenerate_at`` that
        share; ``removed``: it may hold a removed file's text (regenerated, or stale until the
        refresh). None: the state does not know the node."""
        assert self.drift is not None
        tokens = self.drift(node_id)
        if tokens is None:
            return None
        removed = math.isinf(tokens)
        return {
            "tokens": None if removed else round(tokens),
            "children_tokens": children_tokens,
            "share": None if removed else round(tokens / max(1, children_tokens), 3),
            "regenerate_at": self.regenerate_at,
            "removed": removed,
        }

    def children(
        self, node_id: str, offset: int, limit: int, readable: Classes = None
    ) -> dict[str, Any] | None:
        """Return previews of ``limit`` children of a node from position ``offset``, or None.

        ``{"node_id", "total", "offset", "nodes", "next"}``; ``next`` is the next page's offset
        or None. Positions are in the node's list of children; for a caller who may read
        ``readable``, a child it may not read is left out of its page.

        Raises:
            ValueError: ``offset < 0`` or ``limit`` outside 1..MAX_PAGE.
        """
        if offset < 0 or not 1 <= limit <= MAX_PAGE:
            raise ValueError(
                f"children pages need offset >= 0 and limit 1..{MAX_PAGE}, not {offset}, {limit}"
            )
        node = self.get(node_id, readable)
        if node is None:
            return None
        ids = list(node.children[offset : offset + limit])
        end = offset + len(ids)
        return {
            F.NODE_ID: node.node_id,
            "total": len(node.children),
            "offset": offset,
            "nodes": [preview(c) for c in self.readable_nodes(ids, readable)],
            "next": end if end < len(node.children) else None,
        }
