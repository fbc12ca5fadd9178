"""Where a build's store stage goes, per point: the serial part of a build on any number of cores.

    python bench/store_points.py [--points 6000] [--words 180]

Leaf-shaped nodes (the payload every leaf point carries: 26 keys, a text of ``--words`` words,
its file, folder, parent and access class) and random 384-d vectors, written to an embedded
qdrant-edge store as the build's store stage writes them (``EdgeNodeStore.upsert``, whose points
are made by ``retriever.edge_translate.edge_points``). Printed: microseconds a point for the
payload's conversion into the engine's ``Point``, the BM25 encoding of the text, the engine's
upsert, and all of ``upsert`` (the **floor**: the engine's upsert alone, the part no change on
our side removes); the wall of the same conversion on two threads against one (the engine holds
the GIL while it converts); the conversion's cost a value by type (the engine's binding tries
bool, unsigned, signed, float, then string for each value, and every miss builds a Python
error); peak RSS.
"""

from __future__ import annotations

import argparse
import functools
import random
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import qdrant_edge as qe

from retriever.edge_store import EdgeNodeStore
from retriever.edge_translate import edge_payload, edge_points
from retriever.schema import Kind, NodePayload
from retriever.sparse import bm25_documents

DIM = 384


def leaves(n: int, words: int, seed: int = 0) -> list[NodePayload]:
    """``n`` leaf payloads of ``words`` random words, three to a file."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    return [
        NodePayload(
            node_id=str(uuid.UUID(int=rng.getrandbits(128))),
            tree="default",
            layer=0,
            kind=Kind.CHUNK,
            text=" ".join(rng.choice(vocab) for _ in range(words)),
            n_tokens=words + words // 3,
            content_hash=f"{rng.getrandbits(128):032x}",
            source=f"docs/f{i // 3}.txt",
            sources=(f"docs/f{i // 3}.txt",),
            source_dirs=("docs/",),
            chunk_index=i % 3,
            char_start=0,
            char_end=words * 6,
            parents=(str(uuid.UUID(int=rng.getrandbits(128))),),
            access=("owner",),
            embed_model="bench-384",
            updated_at=1.0,
        )
        for i in range(n)
    ]


def _points(point_id: str, payload: dict[str, Any], n: int) -> list[qe.Point]:
    return [qe.Point(point_id, {}, payload) for _ in range(n)]


def per_point(fn: Callable[[], Any], n: int) -> float:
    """Microseconds a point of ``fn()``, which handles ``n`` points."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--points", type=int, default=6000)
    ap.add_argument("--words", type=int, default=180)
    args = ap.parse_args()
    n = args.points
    nodes = leaves(n, args.words)
    vectors = np.random.default_rng(0).standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    payloads = [edge_payload(node) for node in nodes]
    ids = [node.node_id for node in nodes]

    def convert(chunk: range) -> list[qe.Point]:
        return [qe.Point(ids[i], {}, payloads[i]) for i in chunk]

    convert_us = per_point(lambda: convert(range(n)), n)
    one = convert_us * n / 1e6  # the same conversion's wall on one thread, s
    bm25_us = per_point(lambda: bm25_documents([node.text for node in nodes]), n)
    with ThreadPoolExecutor(2) as pool:
        two = time.perf_counter()
        list(pool.map(convert, [range(0, n // 2), range(n // 2, n)]))
        two = time.perf_counter() - two

    with tempfile.TemporaryDirectory() as tmp:
        store = EdgeNodeStore(Path(tmp) / "store")
        store.ensure_collection(DIM, "bench-384")
        half = n // 2
        upsert_us = per_point(lambda: store.upsert(nodes[:half], vectors[:half]), half)
        shard = store.require()
        points = edge_points(nodes[half:], vectors[half:].tolist(), store.index)
        engine_us = per_point(
            lambda: [
                shard.update(qe.UpdateOperation.upsert_points(points[s : s + 256]))
                for s in range(0, len(points), 256)
            ],
            len(points),
        )
        store.close()

    print(f"{n} leaf points, {args.words} words, {len(payloads[0])} payload keys, {DIM}-d")
    print(f"  payload -> engine Point   {convert_us:7.1f} us a point")
    print(f"  BM25 encoding             {bm25_us:7.1f} us a point")
    print(f"  engine upsert (floor)     {engine_us:7.1f} us a point")
    print(
        f"  EdgeNodeStore.upsert      {upsert_us:7.1f} us a point = {upsert_us / engine_us:.1f}x "
        "the floor"
    )
    print(
        f"  conversion on 2 threads: {two / one:.2f}x the wall of 1 (1.0: no overlap, 0.5: ideal)"
    )
    probes: dict[str, Any] = {
        "bool": True,
        "None": None,
        "int": 7,
        "float": 1.5,
        "str": "chunk",
        "tuple of 1 str": ("a",),
    }
    empty = per_point(functools.partial(_points, ids[0], {}, 3000), 3000)
    costs = []
    for name, value in probes.items():
        probe = {f"k{i}": value for i in range(25)}
        us = per_point(functools.partial(_points, ids[0], probe, 3000), 3000)
        costs.append(f"{name} {(us - empty) / 25:.1f}")
    print("  conversion a value, us: " + ", ".join(costs))
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
