"""A share split into several trees with a root tree over their top layers, against one tree.

    python bench/split.py [--leaves 8000] [--parts 4] [--keep DIR]

A simulation of the design in docs/scale.md (the product builds no root tree today). The corpus:
the 24 SQuAD articles of the benchmark data plus filler documents of SQuAD sentences
(``update.synthetic_docs``), about ``--leaves`` leaves in all, in ``--parts`` top-level folders
(articles dealt round-robin, filler shared equally), as a share would be split by top-level folder.
Hashed 384-d embeddings (``testkit.fakes.HashEmbedder``: the real model embeds ~20 chunks/s on this
2-core machine, too slow at these sizes), extractive summaries, the clusterer of ``update.pipeline``.

- A: one tree over the whole share (the product's build, ``Pipeline.build``).
- B: one tree per top-level folder (each its own pipeline and state), then a root tree whose leaves
  are the top-layer nodes of the k trees (their texts and vectors), clustered and summarised by
  the same ``TreeBuilder`` over an in-memory ``TreeState``.

Every build runs in its own process (separate peak RSS), after a small clustering fit that loads
numba's compiled code, so no build pays for that; wall and CPU are of the build alone. B's
"critical path" is the slowest part plus the root: the k parts built on k machines at once.

Recall: every question of the 24 articles; collapsed-tree retrieval by numpy brute force (exact
cosine) over every node of the variant (B: every node of the k trees plus the root's summary
layers, not its leaves, which are the parts' top nodes again), the top ``candidate_limit(2000)``
filled in score order until the next node would pass 2,000 tokens (``retriever.search
.fill_budget``); a hit when an answer string is in the context (``update.recall``'s check).
Leaves only: the same over the leaves, the floor of flat retrieval. Variant A is the floor of B.

2026-11-27, 2-core VM shared with other jobs (load 4-16: wall is inflated, CPU is not); A -> B:
build CPU s, wall s (B: slowest part + root), peak RSS MiB over the ~358 MiB of imports (B: its
largest build), nodes, collapsed recall (B without the root), leaves-only recall:

    python bench/split.py                          7,992 leaves, k = 4
        33.0 -> 35.8 (1.09x), 50.8 -> 21.1 (0.41x), 410 -> 139 (0.34x), 9,056 -> 9,685,
        48.7 -> 50.5 % (50.5 %), 46.2 %; root 8 -> 1 nodes
    python bench/split.py --leaves 16000           15,999 leaves, k = 4
        61.0 -> 63.6 (1.04x), 110.1 -> 48.8 (0.44x), 737 -> 232 (0.31x), 17,589 -> 18,693,
        47.2 -> 49.6 % (49.6 %), 43.4 %; root 16 -> 4 -> 1
    python bench/split.py --leaves 16000 --parts 16   16,053 leaves, k = 16
        67.8 -> 77.3 (1.14x), 137.8 -> 14.0 (0.10x), 748 -> 79 (0.11x), 17,740 -> 19,721,
        47.2 -> 49.3 % (49.3 %), 43.4 %; root 107 -> 17 -> 3 -> 1 (0.4 s CPU)

The numpy search gives the product's ``collapsed_tree`` answers: the same recall on every tenth
question of the 1.7k-leaf A tree (53.9 %). Figures: docs/benchmarks.md#split, docs/scale.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from numpy.typing import NDArray

DIM = 384
BUDGET = 2000


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rss_mb() -> float:
    from datasets import proc_status_mb

    return proc_status_mb().get("VmRSS", float("nan"))


def _warm_numba() -> None:
    """Fit a small clusterer once: numba's compiled code is loaded before the timed build."""
    from ingestor.cluster.two_step import TreeClusterer

    X = np.random.default_rng(0).standard_normal((300, DIM)).astype(np.float32)
    TreeClusterer(random_state=0).fit(X / np.linalg.norm(X, axis=1, keepdims=True))


def _dump(
    path: Path, layers: list[int], texts: list[str], tokens: list[int], vecs: NDArray
) -> None:  # type: ignore[type-arg]
    with path.open("wb") as f:
        pickle.dump(
            {
                "layers": np.asarray(layers, np.int16),
                "texts": texts,
                "tokens": np.asarray(tokens, np.int32),
                "vectors": np.asarray(vecs, np.float32),
            },
            f,
            protocol=5,
        )


def build_one(folder: Path, state_dir: Path, dump: Path) -> dict[str, object]:
    """Build one tree over ``folder`` (the product's build); dump its nodes; return its figures."""
    from update import CountingSummarizer, pipeline

    from testkit.fakes import HashEmbedder

    _warm_numba()
    p = pipeline(state_dir, HashEmbedder(dim=DIM), CountingSummarizer())
    rss0 = _rss_mb()
    t0, c0 = time.perf_counter(), _cpu()
    p.build(folder)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    state = p.require_state()
    ids = list(state.nodes)
    nodes = [state.nodes.peek(i) for i in ids]
    _dump(
        dump,
        [n.layer for n in nodes],  # type: ignore[union-attr]
        [n.text for n in nodes],  # type: ignore[union-attr]
        [n.n_tokens for n in nodes],  # type: ignore[union-attr]
        state.matrix(ids),
    )
    counts = state.layer_counts()
    p.context.store.close()
    return {"wall": wall, "cpu": cpu, "rss_start": rss0, "peak": peak, "layers": counts}


def build_root(parts: list[Path], dump: Path) -> dict[str, object]:
    """Build the root tree over the top layers of the parts' trees; dump its summary layers."""
    from update import MAX_GROUP, CountingSummarizer

    from ingestor.cluster.two_step import TreeClusterer
    from ingestor.tree.build import TreeBuilder, TreeParams
    from ingestor.tree.state import Node, TreeState, sha256_text
    from testkit.fakes import HashEmbedder

    _warm_numba()
    emb = HashEmbedder(dim=DIM)
    tops = []
    for k, path in enumerate(parts):
        d = pickle.loads(path.read_bytes())
        top = int(d["layers"].max())
        tops += [
            (k, d["texts"][i], int(d["tokens"][i]), d["vectors"][i])
            for i in np.flatnonzero(d["layers"] == top)
        ]
        del d
    rss0 = _rss_mb()
    t0, c0 = time.perf_counter(), _cpu()
    state = TreeState(tree="root", root="", embed_model=emb.model_id, dim=DIM)
    for j, (k, text, n_tokens, vec) in enumerate(tops):
        node_id = f"part{k}/top{j}"
        state.nodes[node_id] = Node(
            node_id, 0, text, n_tokens, sha256_text(text), frozenset({f"part{k}/"})
        )
        state.vectors[node_id] = vec
    builder = TreeBuilder(
        emb,
        CountingSummarizer(),  # type: ignore[arg-type]
        lambda: TreeClusterer(random_state=0, max_group=MAX_GROUP),
        # Up to one node: the parts' top layers hold at most 10 nodes each (Algorithm 1 stops
        # there), so with the default the root of a few parts would make no layer at all.
        TreeParams(min_top_nodes=1),
    )
    builder.build(state)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ids = [i for i, n in state.nodes.items() if n.layer > 0]
    nodes = [state.nodes[i] for i in ids]
    _dump(
        dump,
        [n.layer for n in nodes],
        [n.text for n in nodes],
        [n.n_tokens for n in nodes],
        state.matrix(ids) if ids else np.zeros((0, DIM), np.float32),
    )
    return {
        "wall": wall,
        "cpu": cpu,
        "rss_start": rss0,
        "peak": peak,
        "layers": state.layer_counts(),
    }


def make_share(share: Path, leaves: int, parts: int) -> list:  # type: ignore[type-arg]
    """Write the share: SQuAD articles dealt round-robin over ``parts`` folders, filler beside."""
    from datasets import squad_folder
    from update import synthetic_docs

    files, questions = squad_folder(share / "_squad")
    for i, f in enumerate(files):
        (share / f"part{i % parts}").mkdir(parents=True, exist_ok=True)
        f.rename(share / f"part{i % parts}" / f.name)
    (share / "_squad").rmdir()
    # The 24 articles make 777 leaves (docs/benchmarks.md#build); synthetic_docs writes one
    # document per 5 leaves asked, and its 40-sentence documents make 6.6 leaves each.
    per_part = max(0, leaves - 777) / parts * 5 / 6.6
    for k in range(parts):
        synthetic_docs(share / f"part{k}" / "filler", round(per_part), random.Random(k))
    return questions


def _child(*flags: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, *flags], capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise SystemExit(f"bench/split.py {' '.join(flags)} failed:\n{out.stderr[-3000:]}")
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def load(dumps: list[Path]) -> dict[str, object]:
    """Concatenate node dumps into one searchable set of nodes."""
    ds = [pickle.loads(p.read_bytes()) for p in dumps]
    return {
        "layers": np.concatenate([d["layers"] for d in ds]),
        "texts": [t.lower() for d in ds for t in d["texts"]],
        "tokens": np.concatenate([d["tokens"] for d in ds]),
        "vectors": np.concatenate([d["vectors"] for d in ds]),
    }


def recall(nodes: dict, Q: NDArray, answers: list, *, leaves_only: bool) -> tuple[float, float]:  # type: ignore[type-arg]
    """Answer recall of the collapsed tree at ``BUDGET`` tokens, and the summaries' token share."""
    from retriever.budget import fill
    from retriever.search import candidate_limit

    keep = np.flatnonzero(nodes["layers"] == 0) if leaves_only else np.arange(len(nodes["texts"]))
    V, tokens, layers = nodes["vectors"][keep], nodes["tokens"][keep], nodes["layers"][keep]
    texts = [nodes["texts"][i] for i in keep]
    limit = min(candidate_limit(BUDGET), len(keep) - 1)
    hits, summary_tok, all_tok = 0, 0, 0
    for s in range(0, len(Q), 256):
        S = Q[s : s + 256] @ V.T
        top = np.argpartition(-S, limit, axis=1)[:, :limit]
        for row, cand in enumerate(top):
            order = cand[np.argsort(-S[row, cand], kind="stable")]
            # fill_budget: stop at the first node that would pass the budget
            picked = fill(order, lambda i: int(tokens[i]), BUDGET)
            total = sum(int(tokens[i]) for i in picked)
            context = " ".join(texts[i] for i in picked)
            hits += any(a.lower() in context for a in answers[s + row])
            summary_tok += int(sum(tokens[i] for i in picked if layers[i] > 0))
            all_tok += total
    return hits / len(Q), summary_tok / max(1, all_tok)


def _layers(counts: dict) -> str:  # type: ignore[type-arg]
    return "/".join(str(counts[k]) for k in sorted(counts, key=int))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--leaves", type=int, default=8000, help="leaves in all (about)")
    ap.add_argument("--parts", type=int, default=4, help="top-level folders, one tree each in B")
    ap.add_argument("--keep", type=Path, help="work in this new folder and keep it")
    ap.add_argument("--one", nargs=3, type=Path, help=argparse.SUPPRESS)  # folder state dump
    ap.add_argument("--root", nargs="+", type=Path, help=argparse.SUPPRESS)  # dump part-dumps...
    args = ap.parse_args()
    if args.one:
        print(json.dumps(build_one(*args.one)))
        return
    if args.root:
        print(json.dumps(build_root(args.root[1:], args.root[0])))
        return
    from testkit.fakes import HashEmbedder

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = args.keep or Path(tmp_s)
        if args.keep and args.keep.exists() and any(args.keep.iterdir()):
            raise SystemExit(
                f"--keep {args.keep} is not empty: its trees would be rebuilt from their summary "
                "cache, not from scratch; pass a new folder"
            )
        share = tmp / "share"
        questions = make_share(share, args.leaves, args.parts)
        print(
            f"share: {args.parts} top-level folders, {len(questions)} SQuAD questions; hashed "
            f"{DIM}-d embeddings (the real model is too slow on 2 cores at this size), extractive "
            "summaries, numpy brute-force search",
            flush=True,
        )
        head = (
            f"  {'build':<10} {'nodes per layer':<32} {'wall s':>7} {'cpu s':>7} "
            f"{'RSS start':>9} {'peak MiB':>8} {'peak-start':>10}"
        )
        print(head)
        rows: dict[str, dict] = {}  # type: ignore[type-arg]
        rows["A"] = _child("--one", str(share), str(tmp / "A"), str(tmp / "A.pkl"))
        for k in range(args.parts):
            rows[f"B part{k}"] = _child(
                "--one", str(share / f"part{k}"), str(tmp / f"B{k}"), str(tmp / f"B{k}.pkl")
            )
        part_dumps = [tmp / f"B{k}.pkl" for k in range(args.parts)]
        rows["B root"] = _child("--root", str(tmp / "Broot.pkl"), *map(str, part_dumps))
        for name, r in rows.items():
            print(
                f"  {name:<10} {_layers(r['layers']):<32} {r['wall']:7.1f} {r['cpu']:7.1f} "
                f"{r['rss_start']:9.0f} {r['peak']:8.0f} {r['peak'] - r['rss_start']:10.0f}",
                flush=True,
            )
        a = rows["A"]
        b = [r for n, r in rows.items() if n.startswith("B")]
        parts_only = [r for n, r in rows.items() if n.startswith("B part")]
        b_cpu = sum(r["cpu"] for r in b)
        b_wall = sum(r["wall"] for r in b)
        b_path = max(r["wall"] for r in parts_only) + rows["B root"]["wall"]
        b_peak = max(r["peak"] for r in b)
        b_own = max(r["peak"] - r["rss_start"] for r in b)
        a_own = a["peak"] - a["rss_start"]
        print(
            f"  B: wall {b_wall:.1f} s in sequence, {b_path:.1f} s on {args.parts} machines "
            f"(slowest part + root); cpu {b_cpu:.1f} s; peak {b_peak:.0f} MiB (largest build)"
        )
        emb = HashEmbedder(dim=DIM)
        Q = emb.embed_documents([q.text for q in questions])
        answers = [q.answers for q in questions]
        A_nodes = load([tmp / "A.pkl"])
        B_nodes = load([*part_dumps, tmp / "Broot.pkl"])
        res = {}
        variants = (("A", A_nodes), ("B", B_nodes), ("B no root", load(part_dumps)))
        for name, nodes in variants:
            col, share_sum = recall(nodes, Q, answers, leaves_only=False)
            leaf, _ = recall(nodes, Q, answers, leaves_only=True)
            res[name] = (len(nodes["texts"]), col, leaf, share_sum)
        print(f"  {'':<10} {'nodes':>7} {'collapsed':>9} {'leaves':>7} {'summary tokens':>14}")
        for name, (n, col, leaf, sh) in res.items():
            print(f"  {name:<10} {n:7d} {col:9.1%} {leaf:7.1%} {sh:14.1%}")
        print(
            f"  B/A: cpu {b_cpu / a['cpu']:.2f}x, wall in sequence {b_wall / a['wall']:.2f}x, "
            f"wall on {args.parts} machines {b_path / a['wall']:.2f}x, peak RSS "
            f"{b_peak / a['peak']:.2f}x ({b_own / a_own:.2f}x over the imports), nodes "
            f"{res['B'][0] / res['A'][0]:.3f}x, collapsed recall {100 * (res['B'][1] - res['A'][1]):+.1f}"
            " points"
        )


if __name__ == "__main__":
    main()
