"""The picture of a tree: every node laid out as an icicle, sent as a few compact arrays.

The icicle has one band per layer (leaves at the bottom); each node spans, in its band, the leaves
under it, so a summary's width is the number of leaves under it and the bands line up. Colour is
the top-level folder of the files under a node (the folders shared by every file stripped first:
a tree of ``notes/a/...`` and ``notes/b/...`` is coloured by ``a`` and ``b``); a summary over
several folders takes the one most of its leaves come from, and says how many do (``purity``).

A node can have several parents (soft clustering puts a chunk in more than one cluster). The
icicle needs one: each node is drawn under its first parent, except that a summary all of whose
children were claimed by other parents takes one child back (so that every summary has a width).
The node panel lists every parent.

Why the node store: the same reason as :mod:`~ingestor.service.dashboard.view` (the daemon reads
it through its short per-call lock, never the writer's). Reading every node's links costs O(tree)
(about 1.3 s at 100k nodes: only the fields a :class:`Link` holds are read, 3.3 s as whole
nodes), so the result is cached per tree version (:mod:`.pictures`).

The JSON (one object; arrays are little-endian typed arrays in base64):

- ``ids``: 16 bytes per node (its uuid), in picture order: the leaves left to right, then layer
  1 left to right, and so on (``layers``: ``[{"layer", "start", "count"}]``, bottom first);
- ``width``: the number of leaves (leaf ``i`` spans ``[i, i+1)``);
- ``x0``, ``size`` (int32): for each summary (index ``i - width``), its first leaf and the number
  of leaves under it;
- ``folder`` (uint8, every node): its colour, an index into ``folders`` (``[{"name", "leaves"}]``,
  most leaves first; the last entry is "other" when there are more than :data:`LEGEND` folders);
  ``purity`` (uint8, each summary): 255 times the share of its leaves in that folder;
- ``touched`` (int32): the nodes written by the last update, with ``touched_note`` saying which
  update that is (or why none is marked).
"""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from retriever import F, NodeStore, SearchFilter

#: Folders with a colour of their own; the others share "other".
LEGEND: Final = 11
#: Name of the shared colour of the folders past :data:`LEGEND`.
OTHER: Final = "other folders"
#: Nodes per store call while reading the tree.
SCROLL_PAGE: Final = 1024


class Link(NamedTuple):
    """What the picture needs of a node: no text (100k texts would be ~10x the memory)."""

    node_id: str
    layer: int
    parents: tuple[str, ...]
    children: tuple[str, ...]
    source: str | None
    updated_at: float

    @classmethod
    def of_fields(cls, payload: dict[str, Any]) -> Link:
        """The link of a payload read as :data:`LINK_FIELDS` (a field a point lacks: its
        default, as :class:`~retriever.schema.NodePayload` has it)."""
        return cls(
            str(payload[F.NODE_ID]),
            int(payload[F.LAYER]),
            tuple(payload.get(F.PARENTS) or ()),
            tuple(payload.get(F.CHILDREN) or ()),
            payload.get(F.SOURCE),
            float(payload.get(F.UPDATED_AT) or 0.0),
        )


#: The payload fields a :class:`Link` is read from (the engine converts these alone).
LINK_FIELDS: Final = (F.NODE_ID, F.LAYER, F.PARENTS, F.CHILDREN, F.SOURCE, F.UPDATED_AT)


@dataclass(frozen=True)
class Touched:
    """Which nodes the last update wrote: those with ``updated_at >= since`` (None: none)."""

    since: float | None
    note: str


@dataclass(frozen=True)
class Layout:
    """The icicle: nodes in picture order and, per node, where it is drawn and in what colour."""

    ids: list[str]
    layers: list[dict[str, int]]  # {"layer", "start", "count"}, bottom layer first
    width: int  # leaves
    x0: NDArray[np.int64]  # per node: first leaf under it
    size: NDArray[np.int64]  # per node: leaves under it (1 for a leaf)
    folder: NDArray[np.uint8]  # per node: index into ``folders``
    purity: NDArray[np.uint8]  # per node: 255 * share of its leaves in that folder
    updated_at: NDArray[np.float64]  # per node: when it was written
    folders: list[dict[str, Any]]  # {"name", "leaves"}, most leaves first
    under: str  # the folder prefix every file shares (stripped before colouring)

    def layer_range(self, layer: int) -> tuple[int, int]:
        """Return ``(start, count)`` of ``layer`` in picture order.

        Raises:
            ValueError: the tree has no such layer.
        """
        for entry in self.layers:
            if entry[F.LAYER] == layer:
                return entry["start"], entry["count"]
        have = [e[F.LAYER] for e in self.layers]
        raise ValueError(f"tree has no layer {layer}; its layers are {have}")


def read_nodes(store: NodeStore, tree: str, readable: tuple[str, ...] | None = None) -> list[Link]:
    """Return the links of every node of ``tree`` in ``store`` (pages of :data:`SCROLL_PAGE`)
    that a caller who may read ``readable`` may read (None: every node). Only the links' fields
    are read: 100k nodes in ~1.3 s, where whole nodes (their text, validated) took ~3.3 s."""
    flt = SearchFilter(tree=tree, readable=readable)
    out: list[Link] = []
    offset: str | None = None
    while True:
        page, offset = store.scroll_fields(flt, LINK_FIELDS, SCROLL_PAGE, offset)
        out += map(Link.of_fields, page)
        if offset is None:
            return out


def top_folders(sources: Sequence[str]) -> tuple[list[str], str]:
    """Return each source's colour folder and the folder prefix they all share.

    The colour folder is the first folder below the shared prefix (``""`` for a file directly in
    it): ``["a/x/1.md", "a/y/2.md", "a/3.md"]`` → ``(["x", "y", ""], "a/")``.
    """
    dirs = [s.split("/")[:-1] for s in sources]
    common: list[str] = []
    if dirs:
        for parts in zip(*dirs, strict=False):
            if len(set(parts)) != 1:
                break
            common.append(parts[0])
    k = len(common)
    return [d[k] if len(d) > k else "" for d in dirs], "".join(c + "/" for c in common)


def _primary_parents(
    nodes: Sequence[Link], index: dict[str, int]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Return each node's parent in the icicle (-1: a root) and its place among that parent's
    children: its first parent above it, then one child given back to each summary left
    without any."""
    n = len(nodes)
    parent = np.full(n, -1, dtype=np.int64)
    layer = [node.layer for node in nodes]
    for i, node in enumerate(nodes):
        for p in node.parents:
            j = index.get(p)
            if j is not None and layer[j] > layer[i]:
                parent[i] = j
                break
    claimed = np.bincount(parent + 1, minlength=n + 1)[1:]  # children claimed per node
    for j in np.flatnonzero((claimed == 0) & (np.array(layer) > 0)).tolist():
        for c in nodes[j].children:
            k = index.get(c)
            if k is None or layer[k] >= layer[j]:
                continue
            was = parent[k]
            if was < 0 or claimed[was] > 1:
                if was >= 0:
                    claimed[was] -= 1
                parent[k], claimed[j] = j, 1
                break
    place = np.zeros(n, dtype=np.int64)
    for j, node in enumerate(nodes):
        if layer[j] > 0:
            for pos, c in enumerate(node.children):
                k = index.get(c)
                if k is not None and parent[k] == j:
                    place[k] = pos
    return parent, place


def lay_out(nodes: Sequence[Link]) -> Layout:
    """Lay ``nodes`` (one tree, any order) out as an icicle; see the module's docstring."""
    n = len(nodes)
    index = {node.node_id: i for i, node in enumerate(nodes)}
    parent, place = _primary_parents(nodes, index)
    layer = np.array([node.layer for node in nodes], dtype=np.int64)
    leaves = np.flatnonzero(layer == 0)

    # colours: each leaf's folder, the legend's most common ones first
    sources = [nodes[i].source or "" for i in leaves.tolist()]
    files = list(dict.fromkeys(sources))
    file_folders, under = top_folders(files)
    file_folder = dict(zip(files, file_folders, strict=True))
    names = [file_folder[s] for s in sources]
    by_count = Counter(names).most_common()
    shown = by_count if len(by_count) <= LEGEND + 1 else by_count[:LEGEND]
    colour = {name: k for k, (name, _) in enumerate(shown)}
    folders = [{"name": name, "leaves": c} for name, c in shown]
    if len(shown) < len(by_count):
        folders.append({"name": OTHER, "leaves": sum(c for _, c in by_count[LEGEND:])})

    # bottom-up, a layer at a time: leaves under each node, per colour
    counts = np.zeros((n, len(folders)), dtype=np.int64)
    counts[leaves, [colour.get(x, LEGEND) for x in names]] = 1
    layers = np.unique(layer)
    for k in layers:
        below = np.flatnonzero((layer == k) & (parent >= 0))
        np.add.at(counts, parent[below], counts[below])
    size = counts.sum(axis=1)
    # ties go to the folder with more leaves in the tree (the legend's order)
    folder = counts.argmax(axis=1).astype(np.uint8) if folders else np.zeros(n, np.uint8)
    top = counts.max(axis=1) if folders else np.zeros(n, np.int64)
    purity = np.rint(255 * top / np.maximum(size, 1)).astype(np.uint8)

    # top-down: roots grouped by colour (biggest first), then each node after its siblings of
    # lower colour (same colour: the parent's order), so that a summary's leaves group by folder;
    # a summary with no leaf under it is drawn nowhere (size 0)
    x0 = np.zeros(n, dtype=np.int64)
    roots = np.flatnonzero((parent < 0) & (size > 0))
    roots = roots[np.lexsort((roots, -layer[roots], -size[roots], folder[roots]))]
    x0[roots] = np.cumsum(size[roots]) - size[roots]
    for k in layers[::-1]:
        kids = np.flatnonzero((layer == k) & (parent >= 0))
        kids = kids[np.lexsort((place[kids], folder[kids], parent[kids]))]
        before = np.cumsum(size[kids]) - size[kids]  # within the layer; restarted per parent
        first = np.r_[True, parent[kids][1:] != parent[kids][:-1]] if len(kids) else kids
        start = np.maximum.accumulate(np.where(first, np.arange(len(kids)), 0))
        x0[kids] = x0[parent[kids]] + before - before[start]

    order = np.lexsort((-size, x0, layer))
    starts = np.searchsorted(layer[order], layers)
    counts_per = np.diff(np.r_[starts, n])
    bands = [
        {F.LAYER: int(k), "start": int(a), "count": int(c)}
        for k, a, c in zip(layers, starts, counts_per, strict=True)
    ]
    return Layout(
        ids=[nodes[i].node_id for i in order.tolist()],
        layers=bands,
        width=len(leaves),
        x0=x0[order],
        size=size[order],
        folder=folder[order],
        purity=purity[order],
        updated_at=np.array([nodes[i].updated_at for i in order.tolist()], dtype=np.float64),
        folders=folders,
        under=under,
    )


def b64(values: NDArray[Any], dtype: str) -> str:
    """Return ``values`` as base64 of a little-endian array of ``dtype`` (e.g. ``"<i4"``)."""
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode("ascii")


def picture_json(layout: Layout, tree: str, version: str, touched: Touched) -> dict[str, Any]:
    """Return the picture's JSON (see the module's docstring) for ``layout``."""
    w = layout.width
    marked = (
        np.flatnonzero(layout.updated_at >= touched.since)
        if touched.since is not None
        else np.zeros(0, dtype=np.int64)
    )
    ids = b"".join(uuid.UUID(i).bytes for i in layout.ids)
    return {
        F.TREE: tree,
        "version": version,
        "n": len(layout.ids),
        "width": w,
        "layers": layout.layers,
        "ids": base64.b64encode(ids).decode("ascii"),
        "x0": b64(layout.x0[w:], "<i4"),
        "size": b64(layout.size[w:], "<i4"),
        "folder": b64(layout.folder, "u1"),
        "purity": b64(layout.purity[w:], "u1"),
        "folders": layout.folders,
        "under": layout.under,
        "touched": b64(marked, "<i4"),
        "touched_note": touched.note,
    }
