"""Retrieval quality on real data, the numbers later work is compared against.

SQuAD (24 articles, 4,961 questions): does the context (2,000 tokens) contain a gold answer string?
Rates for collapsed tree, tree traversal, and leaves only (flat RAG, same budget).
HotpotQA (50 multi-hop items, paragraphs of all items in one tree): rate at which both gold
paragraphs are represented in the context (a node whose sources include the paragraph's file), and
the stricter rate where both appear as leaves; plus answer-string recall.

    python bench/quality.py [--articles N] [--max-tokens 2000] [--questions N]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from datasets import Question, hotpot_folder, peak_rss_mb, squad_folder, squad_titles

from ingestor.cli.factories import make_embedder, make_pipeline
from ingestor.config import Settings
from retriever import ScoredNode, SearchFilter, collapsed_tree, tree_traversal
from retriever.edge_store import EdgeNodeStore

Mode = Callable[..., list[ScoredNode]]


def _contains_answer(hits: list[ScoredNode], answers: tuple[str, ...]) -> bool:
    text = " ".join(h.node.text for h in hits).lower()
    return any(a.lower() in text for a in answers)


def evaluate(
    name: str, corpus: Path, questions: list[Question], tmp: Path, max_tokens: int
) -> None:
    settings = Settings(_env_file=None, state_dir=tmp / f"state-{name}")  # type: ignore[call-arg]
    embedder = make_embedder(settings)
    store = EdgeNodeStore(settings.state_dir / "qdrant")
    t0 = time.perf_counter()
    report = make_pipeline(settings, store, embedder).build(corpus)
    print(
        f"[{name}] built {report.leaves} leaves, layers {report.layers} in {time.perf_counter() - t0:.0f}s"
    )
    qvecs = embedder.embed_documents([q.text for q in questions])
    flt = SearchFilter(tree=settings.tree)
    modes: dict[str, Callable[[object], list[ScoredNode]]] = {
        "collapsed tree": lambda v: collapsed_tree(store, v, flt, max_tokens=max_tokens),
        "tree traversal": lambda v: tree_traversal(store, v, flt, top_k=5, max_tokens=max_tokens),
        "leaves only": lambda v: collapsed_tree(
            store, v, SearchFilter(tree=settings.tree, max_layer=0), max_tokens=max_tokens
        ),
    }
    print(f"[{name}] {len(questions)} questions, context budget {max_tokens} tokens")
    print(
        f"  {'mode':<16} {'answer in ctx':>13} {'both gold rep.':>14} {'both gold leaves':>16} {'ms/query':>9}"
    )
    for mode, fn in modes.items():
        hit = both = both_leaves = 0
        t0 = time.perf_counter()
        for q, v in zip(questions, qvecs, strict=True):
            hits = fn(v)
            hit += _contains_answer(hits, q.answers)
            if len(q.gold_sources) == 2:
                rep = [set(h.node.sources) for h in hits]
                leaves = {h.node.source for h in hits if h.node.layer == 0}
                both += all(any(g in r for r in rep) for g in q.gold_sources)
                both_leaves += all(g in leaves for g in q.gold_sources)
        ms = (time.perf_counter() - t0) * 1000 / len(questions)
        n = len(questions)
        gold = (
            f"{both / n:14.1%} {both_leaves / n:16.1%}"
            if name == "hotpotqa"
            else f"{'-':>14} {'-':>16}"
        )
        print(f"  {mode:<16} {hit / n:13.1%} {gold} {ms:9.1f}")
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--articles", type=int, default=24)
    ap.add_argument("--questions", type=int, default=0, help="limit SQuAD questions (0 = all)")
    ap.add_argument("--max-tokens", type=int, default=2000)
    ap.add_argument("--skip-squad", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        if not args.skip_squad:
            _, qs = squad_folder(tmp / "squad", squad_titles()[: args.articles])
            evaluate("squad", tmp / "squad", qs[: args.questions or None], tmp, args.max_tokens)
        _, hq = hotpot_folder(tmp / "hotpot")
        evaluate("hotpotqa", tmp / "hotpot", hq, tmp, args.max_tokens)
    print(f"peak RSS {peak_rss_mb():.0f} MiB")


if __name__ == "__main__":
    main()
