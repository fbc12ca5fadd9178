"""Synthetic tree-shaped nodes for bench/query.py: topic-clustered leaves, summaries as means.

384-d normalised vectors, leaves clustered by topic (like real sentence embeddings), each summary
the normalised mean of ~6 children, layer sizes shrinking 6x per layer (~83 % leaves), two trees
(~60/40), sources in nested folders. Queries are perturbed leaves; four filters (tree, tree +
layer >= 1, tree + folder, tree + leaves only as `--layers 0-0` and postQFRAP's default base ask)
with the mask of the nodes each keeps, for brute force.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from retriever.schema import Kind, NodePayload, SearchFilter, point_id, source_dirs  # noqa: E402

DIM = 384
MODEL = "bench-synthetic-384"
FANOUT = 6
TREES = ("big", "small")


@dataclass
class Corpus:
    nodes: list[NodePayload]
    vectors: NDArray[np.float32]
    trees: NDArray[np.str_]
    layers: NDArray[np.int64]
    folders: list[tuple[str, ...]]  # source_dirs per node
    leaves: NDArray[np.int64]  # indices of layer-0 nodes


def _normalise(x: NDArray[np.float32]) -> NDArray[np.float32]:
    out: NDArray[np.float32] = x / np.linalg.norm(x, axis=-1, keepdims=True)
    return out


def make_corpus(n: int, rng: np.random.Generator) -> Corpus:
    """Build ``n`` tree-shaped nodes: leaves by topic, summaries = means of ~6 children."""
    n_leaves = round(n / sum(FANOUT**-i for i in range(5)))
    text = "lorem ipsum dolor sit amet " * 40  # ~1 kB, like a 250-token chunk
    n_topics = max(8, n_leaves // 150)
    centroids = rng.standard_normal((n_topics, DIM)).astype(np.float32)
    nodes: list[NodePayload] = []
    vecs: list[NDArray[np.float32]] = []
    big = round(n_leaves * 0.6)
    for tree, count in zip(TREES, (big, n_leaves - big), strict=True):
        topic = np.sort(rng.integers(0, n_topics, count))
        noise = rng.standard_normal((count, DIM)).astype(np.float32) * 1.1
        layer_vecs = _normalise(centroids[topic] + noise)
        files = [
            f"area{t % 7}/topic{t}/doc{rng.integers(0, 20)}.md" for t in topic
        ]  # documents follow topics, like a real folder
        layer_sources: list[tuple[str, ...]] = [(f,) for f in files]
        layer_ids = []
        for i in range(count):
            node = NodePayload(
                node_id=point_id(f"{tree}/0/{i}"),
                tree=tree,
                layer=0,
                kind=Kind.CHUNK,
                text=text,
                n_tokens=int(rng.integers(150, 251)),
                content_hash=f"{tree}-{i}",
                source=files[i],
                sources=(files[i],),
                source_dirs=source_dirs(files[i]),
                chunk_index=i,
                char_start=0,
                char_end=len(text),
                embed_model=MODEL,
                updated_at=0.0,
            )
            nodes.append(node)
            layer_ids.append(node.node_id)
        vecs.append(layer_vecs)
        layer = 0
        while len(layer_ids) > 10 and layer < 4:
            layer += 1
            groups = [
                range(s, min(s + FANOUT, len(layer_ids))) for s in range(0, len(layer_ids), FANOUT)
            ]
            parent_vecs = _normalise(np.stack([layer_vecs[list(g)].mean(axis=0) for g in groups]))
            parent_sources = [
                tuple(sorted({s for c in g for s in layer_sources[c]})) for g in groups
            ]
            parent_ids = []
            for j, g in enumerate(groups):
                srcs = parent_sources[j]
                node = NodePayload(
                    node_id=point_id(f"{tree}/{layer}/{j}"),
                    tree=tree,
                    layer=layer,
                    kind=Kind.SUMMARY,
                    text=text[:600],
                    n_tokens=int(rng.integers(80, 161)),
                    content_hash=f"{tree}-{layer}-{j}",
                    sources=srcs,
                    source_dirs=tuple(sorted({d for s in srcs for d in source_dirs(s)})),
                    children=tuple(layer_ids[c] for c in g),
                    summarizer="extractive",
                    embed_model=MODEL,
                    updated_at=0.0,
                )
                nodes.append(node)
                parent_ids.append(node.node_id)
            vecs.append(parent_vecs)
            layer_ids, layer_vecs, layer_sources = parent_ids, parent_vecs, parent_sources
    vectors = np.ascontiguousarray(np.concatenate(vecs), dtype=np.float32)
    layers = np.array([nd.layer for nd in nodes])
    return Corpus(
        nodes=nodes,
        vectors=vectors,
        trees=np.array([nd.tree for nd in nodes]),
        layers=layers,
        folders=[nd.source_dirs for nd in nodes],
        leaves=np.nonzero(layers == 0)[0],
    )


@dataclass
class Case:
    name: str
    flt: SearchFilter
    mask: NDArray[np.bool_]  # which nodes the filter keeps
    queries: NDArray[np.float32]


def make_cases(c: Corpus, k: int, rng: np.random.Generator) -> list[Case]:
    """Four filters. Folder queries come from that folder ("search reports/ about reports")."""
    big = c.trees == TREES[0]
    folder = "area3/"
    in_folder = np.array([folder in f for f in c.folders])
    anywhere = make_queries(c, c.leaves, k, rng)
    return [
        Case("tree", SearchFilter(tree=TREES[0]), big, anywhere),
        Case(
            "tree+layer>=1",
            SearchFilter(tree=TREES[0], min_layer=1),
            big & (c.layers >= 1),
            anywhere,
        ),
        Case(
            "tree+folder",
            SearchFilter(tree=TREES[0], source_prefix=folder),
            big & in_folder,
            make_queries(c, np.nonzero(big & in_folder & (c.layers == 0))[0], k, rng),
        ),
        Case(
            "tree+leaves",
            SearchFilter(tree=TREES[0], max_layer=0),
            big & (c.layers == 0),
            anywhere,
        ),
    ]


def make_queries(
    c: Corpus, pool: NDArray[np.int64], k: int, rng: np.random.Generator
) -> NDArray[np.float32]:
    """Return ``k`` queries: leaves of ``pool``, perturbed (a question near some content)."""
    base = c.vectors[rng.choice(pool, size=k)]
    return _normalise(base + 0.08 * rng.standard_normal(base.shape).astype(np.float32))
