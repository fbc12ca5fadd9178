"""The tree state: every node, its vector, the fitted clusterers and the source index.

One ``TreeState`` per tree is persisted in models_store after every build or update; together with
the Qdrant points it is everything needed to continue the tree without refitting.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from retriever import Kind, NodePayload, point_id, source_dirs

STATE_FORMAT = 1


def sha256_text(text: str) -> str:
    """Return the hex sha256 of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def leaf_id(tree: str, source: str, content_hash: str, occurrence: int) -> str:
    """Return a leaf's node id: stable while the chunk's text is unchanged (edits keep it)."""
    return point_id(f"{tree}/leaf/{source}/{content_hash}/{occurrence}")


def summary_id(tree: str, layer: int, children: list[str]) -> str:
    """Return a summary's node id, addressed by its (sorted) children."""
    digest = hashlib.sha256("\n".join(sorted(children)).encode()).hexdigest()
    return point_id(f"{tree}/summary/{layer}/{digest}")


@dataclass
class Node:
    """One node of the tree (leaf chunk at layer 0, summary above)."""

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
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    summarizer: str | None = None
    updated_at: float = field(default_factory=time.time)

    @property
    def kind(self) -> Literal[Kind.CHUNK, Kind.SUMMARY]:
        return Kind.CHUNK if self.layer == 0 else Kind.SUMMARY

    def payload(self, tree: str, embed_model: str) -> NodePayload:
        """Return the Qdrant payload of this node (the contract of retriever.schema)."""
        dirs = sorted({d for s in self.sources for d in source_dirs(s)})
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
            chunk_index=self.chunk_index,
            char_start=self.char_start,
            char_end=self.char_end,
            parents=tuple(self.parents),
            children=tuple(self.children),
            summarizer=self.summarizer,
            embed_model=embed_model,
            updated_at=self.updated_at,
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

    def unchanged(self, st: os.stat_result) -> bool:
        """Return True if ``st`` shows the file as it was indexed (size, mtime_ns, inode)."""
        return bool(self.mtime_ns) and (self.size, self.mtime_ns, self.inode) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ino,
        )


@dataclass
class TreeState:
    """Everything adrap knows about one tree."""

    tree: str
    root: str
    embed_model: str
    dim: int
    params: dict[str, Any] = field(default_factory=dict)
    format: int = STATE_FORMAT
    generation: int = 0
    nodes: dict[str, Node] = field(default_factory=dict)
    vectors: dict[str, NDArray[np.float32]] = field(default_factory=dict)
    sources: dict[str, SourceEntry] = field(default_factory=dict)
    layers: list[Any] = field(default_factory=list)  # AdaptiveLayer per clustered layer
    summary_cache: dict[str, str] = field(default_factory=dict)
    leaves_at_build: int = 0
    added_since_build: int = 0
    removed_since_build: int = 0
    built_at: float = 0.0

    def layer_counts(self) -> dict[int, int]:
        """Return the number of nodes per layer."""
        return dict(sorted(Counter(n.layer for n in self.nodes.values()).items()))

    def ids_in_layer(self, layer: int) -> list[str]:
        """Return the node ids of one layer, in insertion order."""
        return [i for i, n in self.nodes.items() if n.layer == layer]

    def payloads(self, ids: list[str] | None = None) -> list[NodePayload]:
        """Return the payloads of the given nodes (all by default)."""
        keys = list(self.nodes) if ids is None else ids
        return [self.nodes[i].payload(self.tree, self.embed_model) for i in keys]

    def matrix(self, ids: list[str]) -> NDArray[np.float32]:
        """Return the ``(len(ids), dim)`` matrix of the given nodes' vectors."""
        if not ids:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.vectors[i] for i in ids]).astype(np.float32, copy=False)

    def invariant_violations(self) -> list[str]:
        """Return every broken structural invariant (empty when the tree is consistent)."""
        bad: list[str] = []
        n_leaves = sum(1 for n in self.nodes.values() if n.layer == 0)
        for nid, node in self.nodes.items():
            if nid not in self.vectors:
                bad.append(f"{nid}: no vector")
            for c in node.children:
                child = self.nodes.get(c)
                if child is None:
                    bad.append(f"{nid}: child {c} missing")
                elif nid not in child.parents:
                    bad.append(f"{nid}: child {c} does not list it as parent")
            for p in node.parents:
                if p not in self.nodes:
                    bad.append(f"{nid}: parent {p} missing")
            if node.layer > 0:
                if not node.children:
                    bad.append(f"{nid}: summary without children")
                union = frozenset().union(
                    *(self.nodes[c].sources for c in node.children if c in self.nodes)
                )
                if union != node.sources:
                    bad.append(f"{nid}: sources differ from the union of its children's")
            elif n_leaves > 10 and not node.parents and self.layers:
                bad.append(f"{nid}: leaf without parent in a tree of {n_leaves} leaves")
        indexed = {i for e in self.sources.values() for i in e.node_ids}
        leaves = {i for i, n in self.nodes.items() if n.layer == 0}
        if indexed != leaves:
            bad.append(f"source index lists {len(indexed)} leaves, tree has {len(leaves)}")
        return bad
