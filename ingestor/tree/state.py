"""The tree state: every node, the fitted clusterers, the source index and the summary cache.

One ``TreeState`` per tree lives in a state database (:mod:`ingestor.tree.persist`); its mappings
load rows on first use and a commit writes only the rows an update set, deleted or took to change
(``state.nodes.edit(node_id)``, see :class:`~ingestor.tree.rowmap.RowMap`). The state owns the
clock that ages the rows it holds (:class:`~ingestor.tree.rowmap.Clock`). Node vectors are not
kept on disk: Qdrant holds them, and :class:`~ingestor.tree.vector_map.VectorMap` reads them from the
store when needed. Together with the Qdrant points it is everything needed to continue the tree
without refitting.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from ingestor.tree.changelog import ChangeRecord
from ingestor.tree.rowmap import Clock, RowMap
from ingestor.tree.vector_map import VectorMap
from models_store import library_versions
from retriever import Kind, NodePayload, point_id, source_dirs

if TYPE_CHECKING:
    from ingestor.cluster.adaptive import AdaptiveLayer
    from models_store import RowStore

STATE_FORMAT = 3
#: Formats this version reads: 2 kept a group's points one row each (3 packs them, see
#: ``ingestor.tree.group_rows``); a format-2 state is upgraded by its next commit, so a version
#: that reads only format 2 then refuses it (and says how to rebuild) instead of misreading it.
READABLE_STATE_FORMATS = (2, 3)


def sha256_text(text: str) -> str:
    """Return the hex sha256 of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def leaf_id(tree: str, source: str, content_hash: str, occurrence: int) -> str:
    """Return a leaf's node id: stable while the chunk's text is unchanged (edits keep it)."""
    return point_id(f"{tree}/leaf/{source}/{content_hash}/{occurrence}")


def summary_id(tree: str, layer: int, children: list[str], salt: int = 0) -> str:
    """Return a summary's node id, addressed by its (sorted) children.

    ``salt`` > 0 gives the same children another address: for when the plain one names a node
    that now holds other children (adRAP rewrites a summary in place under its old id).
    """
    digest = hashlib.sha256("\n".join(sorted(children)).encode()).hexdigest()
    return point_id(f"{tree}/summary/{layer}/{digest}" + (f"#{salt}" if salt else ""))


#: The key of ``TreeState.params`` that records a tree's per-node limit of listed sources.
MAX_NODE_SOURCES_PARAM = "max_node_sources"
#: The state parameter naming how the files of the tree were chunked (``Chunker.key``): the
#: chunking of every source entry that names none (those written before entries named theirs).
CHUNKER_PARAM = "chunker"
#: The state parameter naming the summariser (``Summarizer.id``) the tree's summaries were
#: written by at its build or last ``adrap refresh --rewrite``.
SUMMARIZER_PARAM = "summarizer"
#: ... and the form they were written in: the summariser's prompt (or algorithm) version and
#: the summaries' length (``ADRAP_SUMMARY__MAX_TOKENS``), ``"lexical-centrality-1, 150 tokens"``.
SUMMARY_FORM_PARAM = "summary_form"


def folders_of(sources: frozenset[str]) -> frozenset[str]:
    """Return every folder prefix of the given source paths (``retriever.source_dirs``)."""
    return frozenset(d for s in sources for d in source_dirs(s))


@dataclass(frozen=True)
class Provenance:
    """A summary's files and folders: the union of its children's, or capped past a limit.

    A set past the limit is not kept (``capped``, the set empty): a summary of hundreds of
    documents is about none of them in particular, and keeping every path made each update
    rewrite the top summaries' lists, at a cost growing with the collection.
    """

    sources: frozenset[str]
    sources_capped: bool
    dirs: frozenset[str]
    dirs_capped: bool
    #: The access classes of the files under it: the union of its children's, never capped (a
    #: summary is readable only by who may read every class, see ``retriever.schema.F.ACCESS``).
    access: frozenset[str] = frozenset()

    @classmethod
    def merge(cls, kids: list[Node], limit: int) -> Provenance:
        """The union of ``kids``' files and folders, each capped past ``limit`` (0: never).

        Exact: a child past the limit has more than ``limit`` files under it, so its parent has
        too; otherwise every child's set is whole and so is their union.
        """
        files = _union([(k.sources, k.sources_capped) for k in kids], limit)
        dirs = _union([(k.dirs or frozenset(), k.dirs_capped) for k in kids], limit)
        return cls(*files, *dirs, frozenset().union(*(k.access for k in kids)))

    @classmethod
    def of(cls, node: Node) -> Provenance:
        """Return the provenance ``node`` holds (compare with :meth:`merge`'s)."""
        return cls(
            node.sources,
            node.sources_capped,
            node.dirs or frozenset(),
            node.dirs_capped,
            node.access,
        )

    def set_on(self, node: Node) -> None:
        """Give ``node`` this provenance. A stale summary keeps the access classes it had as
        well: its text, kept until its regeneration, was written from files that may have left
        it since (a removed file's text is purged only then), so until then it is served only to
        who could read those too; never to fewer classes than its text came from."""
        node.sources, node.sources_capped = self.sources, self.sources_capped
        node.dirs, node.dirs_capped = self.dirs, self.dirs_capped
        node.access = self.access | node.access if node.stale else self.access


def _union(sets: list[tuple[frozenset[str], bool]], limit: int) -> tuple[frozenset[str], bool]:
    if limit and any(capped for _, capped in sets):
        return frozenset(), True
    out = frozenset().union(*(s for s, _ in sets))
    if limit and len(out) > limit:
        return frozenset(), True
    return out, False


@dataclass
class Node:
    """One node of the tree (leaf chunk at layer 0, summary above).

    ``sources``/``dirs``: the files under the node and their folders (a leaf: its file); for a
    summary the union of its children's, left empty and ``*_capped`` past the tree's
    ``max_node_sources`` (:class:`Provenance`).
    """

    node_id: str
    layer: int
    text: str
    n_tokens: int
    content_hash: str
    sources: frozenset[str]
    source: str | None = None
    chunk_index: int | None = None
    char_start: int | None = None
    char_end: int | None = None
    section: str | None = None  # a leaf's heading path in its document
    locator: str | None = None  # a leaf's place in its file: page, slide, sheet range, row
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    summarizer: str | None = None
    updated_at: float = field(default_factory=time.time)
    sources_capped: bool = False
    dirs: frozenset[str] | None = None  # None when made: the folders of ``sources``
    dirs_capped: bool = False
    #: A summary whose children changed and whose text is not regenerated yet (deferred: see
    #: ``TreeUpdater.refresh``): its children and sources are current, its text and vector old.
    stale: bool = False
    #: A summary's children's tokens gained, lost or rewritten since its text was written
    #: (inf: it may hold a removed node's text); see ``ingestor.tree.tolerance``.
    drift: float = 0.0
    #: The access classes of the files under the node (a leaf: its file's class; a summary: the
    #: union of its children's, :class:`Provenance`); empty in a state made before them.
    access: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.dirs is None:
            self.dirs = folders_of(self.sources)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Read a stored node; one stored before the limit lists every file and no folders."""
        self.__dict__.update(state)
        if state.get("dirs") is None:
            self.dirs = folders_of(self.sources)

    @property
    def kind(self) -> Literal[Kind.CHUNK, Kind.SUMMARY]:
        return Kind.CHUNK if self.layer == 0 else Kind.SUMMARY

    def payload(self, tree: str, embed_model: str) -> NodePayload:
        """Return the Qdrant payload of this node (the contract of retriever.schema)."""
        dirs = sorted(self.dirs or ())
        return NodePayload(
            node_id=self.node_id,
            tree=tree,
            layer=self.layer,
            kind=self.kind,
            text=self.text,
            n_tokens=self.n_tokens,
            content_hash=self.content_hash,
            source=self.source,
            sources=tuple(sorted(self.sources)),
            source_dirs=tuple(dirs),
            sources_capped=self.sources_capped,
            source_dirs_capped=self.dirs_capped,
            chunk_index=self.chunk_index,
            char_start=self.char_start,
            char_end=self.char_end,
            section=self.section,
            locator=self.locator,
            parents=tuple(self.parents),
            children=tuple(self.children),
            summarizer=self.summarizer,
            embed_model=embed_model,
            # Microseconds: the embedded store keeps 16 significant digits of a float, so a
            # 17-digit time.time() came back changed and every reconcile re-stored the node.
            updated_at=round(self.updated_at, 6),
            stale=self.stale,
            access=tuple(sorted(self.access)),
        )


@dataclass
class SourceEntry:
    """What the tree knows of one file: its content hash and the leaves made from it."""

    content_hash: str
    size: int
    mtime: float
    node_ids: list[str]
    mtime_ns: int = 0  # 0: unknown (older state); then the file is read to compare its hash
    inode: int = 0
    #: The file's access class (``ingestor.read.permissions``); "" in a state made before them.
    access: str = ""
    #: How its leaves were chunked (``Chunker.key``); "": as the tree's :data:`CHUNKER_PARAM`.
    chunker: str = ""
    #: The inode's change time when read (``Document.ctime_ns``); 0: unknown (an older state).
    ctime_ns: int = 0

    def unchanged(self, st: os.stat_result) -> bool:
        """Return True if ``st`` shows the file as it was indexed (size, mtime_ns, inode and,
        where known, ctime_ns: an edit of the same size whose mtime was put back moved it)."""
        return (
            bool(self.mtime_ns)
            and (self.size, self.mtime_ns, self.inode) == (st.st_size, st.st_mtime_ns, st.st_ino)
            and self.ctime_ns in (0, st.st_ctime_ns)
        )


#: The state database's namespace of the nodes (:class:`NodeMap`).
NODES_NS: Final = "node"


class NodeMap(RowMap[Node]):
    """The nodes of a tree, keeping the number of nodes per layer as they are set and deleted."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(NODES_NS, clock)
        self.sizes: dict[int, int] = {}

    def __setitem__(self, key: str, value: Node) -> None:
        old = self.peek(key)
        if old is not None:
            self._count(old.layer, -1)
        self._count(value.layer, 1)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        old = self.peek(key)
        if old is None:
            raise KeyError(key)
        self._count(old.layer, -1)
        super().__delitem__(key)

    def _count(self, layer: int, by: int) -> None:
        n = self.sizes.get(layer, 0) + by
        if n:
            self.sizes[layer] = n
        else:
            self.sizes.pop(layer, None)


@dataclass
class TreeState:
    """Everything adrap knows about one tree.

    Its mappings of rows (``nodes``, ``vectors``, ``sources``, ``summary_cache``, ``stale``, and
    those of its stored layers) are made with its :attr:`clock`: each state ages what it holds
    by its own updates. A node or source entry changed in place is taken with ``edit``
    (``state.nodes.edit(node_id)``), or its change is not written.
    """

    tree: str
    root: str
    embed_model: str
    dim: int
    params: dict[str, Any] = field(default_factory=dict)
    format: int = STATE_FORMAT
    generation: int = 0
    #: Time for the rows this state holds in memory, advanced by each update
    #: (:func:`~ingestor.tree.persist.shed_rows`); shared by its mappings, by no other state.
    clock: Clock = field(default_factory=Clock, repr=False, compare=False)
    nodes: NodeMap = field(init=False)
    vectors: VectorMap = field(init=False)
    sources: RowMap[SourceEntry] = field(init=False)
    layers: list[AdaptiveLayer] = field(default_factory=list)  # one per clustered layer
    summary_cache: RowMap[str] = field(init=False)
    #: Stale summaries (node id -> when it went stale): regenerated by the next refresh.
    stale: RowMap[float] = field(init=False)
    leaves_at_build: int = 0
    added_since_build: int = 0
    removed_since_build: int = 0
    built_at: float = 0.0
    #: The state database once committed or opened (``models_store.rows.RowStore``), else None.
    rows: RowStore | None = None
    #: An update's intent is recorded and not yet committed (see ``ingestor.tree.persist``).
    intent_open: bool = False
    #: Bytes the last commit wrote.
    last_commit_bytes: int = 0
    #: The versions of the clustering libraries its fitted models were written or last checked
    #: with (``models_store.library_versions``): when they differ from the running ones, the next
    #: update reads every model and refits those that cannot be read (``tree.model_repair``).
    model_libraries: dict[str, str] = field(default_factory=library_versions)
    #: Change records of the changes made since the last commit, written by the next one
    #: (``ingestor.tree.changelog``; a failed commit drops them with the changes they describe).
    journal: list[ChangeRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes = NodeMap(self.clock)
        self.vectors = VectorMap(self.clock)
        self.sources = RowMap("source", self.clock)
        self.summary_cache = RowMap("cache", self.clock, touch_on_read=True)
        self.stale = RowMap("stale", self.clock)

    @property
    def max_node_sources(self) -> int:
        """The per-node limit of listed files and folders this tree was built with (0: none;
        a state built before the limit has none)."""
        return int(self.params.get(MAX_NODE_SOURCES_PARAM, 0))

    def chunked_as(self, entry: SourceEntry, current: str) -> str:
        """How ``entry``'s file was chunked: its own record, else the tree's, else (a tree
        made before either was recorded) ``current``, the chunking in force."""
        return entry.chunker or str(self.params.get(CHUNKER_PARAM) or current)

    def layer_counts(self) -> dict[int, int]:
        """Return the number of nodes per layer (kept as nodes change: O(layers))."""
        return dict(sorted(self.nodes.sizes.items()))

    def ids_in_layer(self, layer: int) -> list[str]:
        """Return the node ids of one layer, in insertion order."""
        return [i for i, n in self.nodes.items() if n.layer == layer]

    def payloads(self, ids: list[str] | None = None) -> list[NodePayload]:
        """Return the payloads of the given nodes (all by default)."""
        keys = list(self.nodes) if ids is None else ids
        out = []
        for i in keys:
            node = self.nodes.peek(i)
            if node is None:
                raise KeyError(i)
            out.append(node.payload(self.tree, self.embed_model))
        return out

    def matrix(self, ids: list[str]) -> NDArray[np.float32]:
        """Return the ``(len(ids), dim)`` matrix of the given nodes' vectors: a read-only view
        when they are held in this order (a build's leaves), else a copy."""
        if not ids:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.vectors.prefetch(ids)
        return self.vectors.stack(ids)
