"""The tree as one JSON blob for ``adrap explore``: the dashboard page without a daemon.

What is embedded, for a tree of any size: whole layers from the top down while they fit in
``max_nodes``; in the first layer that does not fit, the children of the nodes already embedded
(in their order), up to the cap; nothing below. So the top of the tree is complete and every
embedded node's children can be opened as far as the cap allowed; the page says how many nodes of
each layer the file holds.

Search is off in an exported file: a collapsed-tree query embeds the question with the tree's
embedding model and searches the store's vectors, and neither fits in a web page. The page says
so and points to ``adrap watch`` + ``/dashboard``, or ``adrap query``.
"""

from __future__ import annotations

import time
from typing import Any, Final

from ingestor.service.dashboard.view import TreeView
from retriever import F, SearchFilter

#: Nodes per store call while exporting.
BATCH: Final = 256
#: Default of ``adrap explore --max-nodes``: ~7 MB of HTML with 1 kB chunks.
DEFAULT_MAX_NODES: Final = 5000


def export_data(
    view: TreeView, *, max_nodes: int = DEFAULT_MAX_NODES, updates: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Return the blob the exported page reads: layers, nodes, per-layer order, a note.

    Args:
        view: the tree to export.
        max_nodes: nodes embedded at most (the top layers first).
        updates: what the page shows under "Updates" (state counters, quarantined files).

    Raises:
        ValueError: ``max_nodes < 1``.
    """
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    layers = view.layers()
    nodes: dict[str, dict[str, Any]] = {}
    order: dict[str, list[str]] = {}
    above: list[str] = []  # ids embedded in the layer above, in order
    for entry in layers:
        layer, count = entry[F.LAYER], entry["count"]
        room = max_nodes - len(nodes)
        if room <= 0:
            taken = []
        elif count <= room:
            taken = _whole_layer(view, layer, nodes)
        elif above:
            wanted = list(dict.fromkeys(c for p in above for c in nodes[p][F.CHILDREN]))[:room]
            taken = _by_ids(view, wanted, nodes)
        else:  # the top layer alone is over the cap: its first nodes in id order
            taken = _first_of_layer(view, layer, room, nodes)
        order[str(layer)] = taken
        entry["embedded"] = len(taken)
        above = taken
    total = sum(e["count"] for e in layers)
    whole = len(nodes) == total
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    held = (
        f"the whole tree ({total} nodes)"
        if whole
        else f"{len(nodes)} of the tree's {total} nodes (--max-nodes {max_nodes}): the top "
        "layers whole, then the children of those nodes up to the cap"
    )
    note = (
        f"A snapshot of tree {view.tree!r} exported by `adrap explore` on {when}; it holds "
        f"{held}. Search is off in a file (a query needs the embedding model and the store's "
        "vectors): run `adrap watch DIR` and open /dashboard, or use `adrap query`."
    )
    return {
        F.TREE: view.tree,
        "layers": layers,
        "nodes": nodes,
        "order": order,
        "truncated": not whole,
        "note": note,
        "updates": updates or {},
    }


def _whole_layer(view: TreeView, layer: int, into: dict[str, dict[str, Any]]) -> list[str]:
    return _first_of_layer(view, layer, None, into)


def _first_of_layer(
    view: TreeView, layer: int, most: int | None, into: dict[str, dict[str, Any]]
) -> list[str]:
    """Embed the first ``most`` nodes of ``layer`` in id order (all when None)."""
    flt = SearchFilter(tree=view.tree, min_layer=layer, max_layer=layer)
    taken: list[str] = []
    offset: str | None = None
    while most is None or len(taken) < most:
        size = BATCH if most is None else min(BATCH, most - len(taken))
        page, offset = view.store.scroll(flt, size, offset)
        for node in page:
            into[node.node_id] = node.to_payload()
            taken.append(node.node_id)
        if offset is None:
            break
    return taken


def _by_ids(view: TreeView, ids: list[str], into: dict[str, dict[str, Any]]) -> list[str]:
    """Embed the nodes ``ids`` (those that exist), in that order."""
    taken: list[str] = []
    for start in range(0, len(ids), BATCH):
        for node in view.store.retrieve(ids[start : start + BATCH]):
            into[node.node_id] = node.to_payload()
            taken.append(node.node_id)
    return taken
