"""Retrieval quality on real data, the numbers later work is compared against.

Sets (each its own tree): SQuAD (24 articles, 4,961 questions; a gold answer string in the
context); HotpotQA (50 multi-hop items, the paragraphs of all items in one tree: the answer
string, both gold paragraphs represented (a context piece whose sources include the paragraph's
file), and *evidence*: every supporting sentence in the context's text, with where each sat:
a summary's text only, a leaf's only, or both); the QuALITY story (5 thematic "why" questions over
one long story: the share of the gold option's words the context holds); the Cinderella tale (8
thematic questions written for this bench, ``bench/data/cinderella_questions.json``: the share of
a reference answer's words, and evidence: every phrase of the tale it rests on); with
``--locomo PATH``, LoCoMo's ten long conversations (github.com/snap-research/LoCoMo,
``data/locomo10.json``, CC BY-NC 4.0, so not shipped here: clone it and pass the file) as a share
of chat logs, one file per session, 1,540 questions scored per category (multi-hop, temporal,
open-domain, single-hop): the share of the answer's words the context holds, and evidence,
every turn the answer rests on (``ev share``: the share of those turns held). Scores are string
matches, never an LLM judge.

Modes at the same budgets (``--max-tokens 2000,1000,500``): collapsed tree (the default, which
leaves out summaries that repeat their own children), the papers' collapsed fill, tree traversal,
leaves only (flat RAG), and postQFRAP (Algorithm 3; k0 = 20 retrieved by leaves or by the
collapsed tree; the offline query-focused extractive summariser). Per mode: the summaries' share
of the context's tokens, tokens of the context (what a reader reads), tokens retrieved (postQFRAP
reads k0 nodes to write its context) and ms per query.

Each retrieval mode runs dense and hybrid (``+bm25``: one Query API request, a dense and a BM25
prefetch fused; ``--fusions`` lists the fusions tried on the collapsed tree, e.g.
``dbsf,rrf:60,rrf:2,rrf:60:1.0:0.5``, the first being the one the other hybrid modes use).

``--llm-summaries``: every tree summarised by the local SmolLM2-135M server (xllamacpp, as in the
integration tests) instead of the offline extractive summariser. ``--llm N``: postQFRAP(leaves)
with that server on N HotpotQA questions: seconds, calls and tokens per query (cost only).

    python bench/quality.py [--articles N] [--max-tokens 2000,1000,500] [--questions N]
        [--llm N] [--llm-summaries] [--fusions rrf:60,dbsf] [--no-postqfrap]
        [--hotpot-questions N] [--skip-squad] [--skip-hotpot] [--skip-quality] [--skip-cinderella]
        [--locomo locomo10.json] [--locomo-categories 1,2,3,4] [--locomo-questions N]
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datasets import (
    Question,
    cinderella_folder,
    hotpot_folder,
    locomo_folder,
    peak_rss_mb,
    quality_folder,
    sample,
    squad_folder,
    squad_titles,
)

from ingestor.answer.postqfrap import PostQFRAP, retrieve_k0
from ingestor.answer.provenance import SpanResolver
from ingestor.cli.factories import make_embedder, make_pipeline
from ingestor.config import Settings, SummarySettings
from ingestor.protocols import Summarizer
from ingestor.summarize.query_focused import QueryFocusedExtractiveSummarizer
from retriever import Embedder, NodeStore, SearchFilter, collapsed_tree, tree_traversal
from retriever.budget import DEFAULT_FILL, PAPERS_FILL, FillRule
from retriever.edge_store import EdgeNodeStore
from retriever.sparse import Fusion


@dataclass
class Context:
    text: str
    sources: list[set[str]]  # per context piece: the files it represents
    leaf_sources: set[str]  # files with leaf-level (exact span) evidence
    tokens: int
    retrieved_tokens: int
    calls: int = 0
    summary_tokens: int = 0
    summary_text: str = ""  # the summaries' text (evidence found there: "in a summary")
    leaf_text: str = ""  # the leaves' text (evidence found there: "in a leaf")


Mode = Callable[[str, object], Context]


def plain(hits: list) -> Context:  # type: ignore[type-arg]
    tokens = sum(h.node.n_tokens for h in hits)
    summaries = [h.node for h in hits if h.node.layer > 0]
    return Context(
        " ".join(h.node.text for h in hits),
        [set(h.node.sources) for h in hits],
        {h.node.source for h in hits if h.node.layer == 0},
        tokens,
        tokens,
        summary_tokens=sum(n.n_tokens for n in summaries),
        summary_text=" ".join(n.text for n in summaries),
        leaf_text=" ".join(h.node.text for h in hits if h.node.layer == 0),
    )


def parse_fusion(spec: str) -> Fusion:
    """``rrf:K[:WD:WS]`` or ``dbsf``."""
    method, *rest = spec.split(":")
    if method == "dbsf":
        return Fusion("dbsf")
    k = int(rest[0]) if rest else 60
    weights = (float(rest[1]), float(rest[2])) if len(rest) == 3 else None
    return Fusion("rrf", k, weights)


def fusion_label(fusion: Fusion) -> str:
    label = fusion.method if fusion.method == "dbsf" else f"rrf{fusion.k}"
    if fusion.weights:
        label += "w" + "/".join(f"{w:g}" for w in fusion.weights)
    return label


def postqfrap_mode(
    store: NodeStore,
    embedder: Embedder,
    flt: SearchFilter,
    base: str,
    max_tokens: int,
    summarizer: Summarizer,
    k0: int = 20,
    hybrid: bool = False,
) -> Mode:
    qf = PostQFRAP(summarizer, embedder, tau=max_tokens)

    def run(question: str, vector: object) -> Context:
        text = question if hybrid else None
        hits = retrieve_k0(store, vector, flt, base=base, k0=k0, text=text)  # type: ignore[arg-type]
        vectors = store.retrieve_vectors([h.node.node_id for h in hits])
        r = qf.run(question, hits, vectors, SpanResolver(store))
        spans = [{s.source for s in p.spans} for p in r.parts]
        exact = {s.source for p in r.parts for s in p.spans if s.char_start is not None}
        retrieved = sum(h.node.n_tokens for h in hits)
        return Context(r.context, spans, exact, r.n_tokens, retrieved, r.calls)

    return run


def evaluate(
    name: str,
    corpus: Path,
    questions: list[Question],
    tmp: Path,
    budgets: tuple[int, ...],
    llm_questions: int,
    only_llm: bool = False,
    fusions: tuple[Fusion, ...] = (Fusion(),),
    with_postqfrap: bool = True,
    summary: dict[str, Any] | None = None,
) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        state_dir=tmp / f"state-{name}",
        summary=SummarySettings.model_validate(summary or {}),
    )
    embedder = make_embedder(settings)
    store = EdgeNodeStore(settings.state_dir / "qdrant")
    t0 = time.perf_counter()
    report = make_pipeline(settings, store, embedder).build(corpus)
    print(
        f"[{name}] built {report.leaves} leaves, layers {report.layers} "
        f"in {time.perf_counter() - t0:.0f}s, summaries by {settings.summary.backend}"
    )
    qvecs = embedder.embed_documents([q.text for q in questions])
    flt = SearchFilter(tree=settings.tree)
    leaves = SearchFilter(tree=settings.tree, max_layer=0)
    qfs = QueryFocusedExtractiveSummarizer()

    def modes_at(max_tokens: int) -> dict[str, Mode]:
        def collapsed(f: SearchFilter, hybrid: bool, rule: FillRule = DEFAULT_FILL) -> Mode:
            return lambda q, v: plain(
                collapsed_tree(
                    store,
                    v,  # type: ignore[arg-type]
                    f,
                    max_tokens=max_tokens,
                    text=q if hybrid else None,
                    rule=rule,
                )
            )

        def traversal(hybrid: bool) -> Mode:
            return lambda q, v: plain(
                tree_traversal(
                    store,
                    v,  # type: ignore[arg-type]
                    flt,
                    top_k=5,
                    max_tokens=max_tokens,
                    text=q if hybrid else None,
                )
            )

        modes: dict[str, Mode] = {
            "collapsed tree": collapsed(flt, False),
            "tree traversal": traversal(False),
            "leaves only": collapsed(leaves, False),
            "tree traversal +bm25": traversal(True),
            "leaves only +bm25": collapsed(leaves, True),
            "collapsed papers' fill +bm25": collapsed(flt, True, PAPERS_FILL),
        }
        for fusion in fusions:
            modes[f"collapsed +bm25 {fusion_label(fusion)}"] = collapsed(flt, True)
        if with_postqfrap:
            modes |= {
                "postqfrap(leaves)": postqfrap_mode(
                    store, embedder, flt, "leaves", max_tokens, qfs
                ),
                "postqfrap(leaves) +bm25": postqfrap_mode(
                    store, embedder, flt, "leaves", max_tokens, qfs, hybrid=True
                ),
                "postqfrap(collapsed)": postqfrap_mode(
                    store, embedder, flt, "collapsed", max_tokens, qfs
                ),
            }
        return {} if only_llm else modes

    fusion_of = {f"collapsed +bm25 {fusion_label(f)}": f for f in fusions}
    for max_tokens in budgets:
        print(f"[{name}] {len(questions)} questions, context budget {max_tokens} tokens")
        print(
            f"  {'mode':<29} {'answer':>7} {'gold rep.':>9} {'evidence':>8} {'ev share':>8}"
            f" {'ev: summ/leaf/both':>18} {'summ tok':>8} {'ctx tok':>7} {'read tok':>8}"
            f" {'ms/query':>8}"
        )
        for mode, fn in modes_at(max_tokens).items():
            store.fusion = fusion_of.get(mode, fusions[0])
            for group, row in score_groups(fn, questions, qvecs):
                print(f"  {mode + (f' [{group}]' if group else ''):<29} {row}")
    if llm_questions:
        llm_cost(store, embedder, flt, questions[:llm_questions], qvecs, budgets[0])
    store.close()


_STOP = frozenset(
    re.findall(
        r"\w+",
        "the a an and or of to in on for with is are was were be he she it his her they them that"
        " this as at by from has have had not but when there who which what why how does did do",
    )
)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z']+", text.lower()) if len(w) > 2 and w not in _STOP}


def score_groups(fn: Mode, questions: list[Question], qvecs: Any) -> list[tuple[str, str]]:
    """Score ``fn`` on each group of questions apart (one group, named "", where a set has
    none); return each group's name and row."""
    groups = sorted({q.group for q in questions})
    if len(groups) == 1:
        return [(groups[0], score(fn, questions, qvecs))]
    rows = []
    for g in groups:
        picked = [i for i, q in enumerate(questions) if q.group == g]
        rows.append((g, score(fn, [questions[i] for i in picked], [qvecs[i] for i in picked])))
    return rows


def score(fn: Mode, questions: list[Question], qvecs: object) -> str:
    """Run ``fn`` on every question; return the table's row (after the mode's name).

    answer: a gold answer string in the context (a QuALITY answer, a sentence: the share of its
    words the context holds); gold rep.: both gold files represented (HotpotQA); evidence: every
    supporting sentence in the context's text (ev share: the share of them it holds; both over
    the questions that have evidence), and where the evidence sentences were found (summary text
    only, leaf text only, both); summ tok: share of the context's tokens that are summaries'.
    Questions marked ``words`` are scored by their answer's words held."""
    hit = both = evidence = share = tokens = read = summ = 0.0
    with_ev = sum(1 for q in questions if q.evidence) or 1
    where = {"summ": 0, "leaf": 0, "both": 0}
    t0 = time.perf_counter()
    for q, v in zip(questions, qvecs, strict=True):  # type: ignore[call-overload]
        ctx = fn(q.text, v)
        text = " ".join(ctx.text.split()).lower()
        if q.words or (
            q.gold_sources and len(q.gold_sources) == 1 and len(q.answers[0].split()) > 4
        ):
            gold = _words(q.answers[0])
            hit += len(gold & _words(ctx.text)) / max(1, len(gold))
        else:
            hit += any(a.lower() in text for a in q.answers)
        tokens += ctx.tokens
        read += ctx.retrieved_tokens
        summ += ctx.summary_tokens / max(1, ctx.tokens)
        if len(q.gold_sources) == 2:
            both += all(any(g in r for r in ctx.sources) for g in q.gold_sources)
        if q.evidence:
            facts = [e.lower() for e in q.evidence]
            evidence += all(f in text for f in facts)
            share += sum(f in text for f in facts) / len(facts)
            in_summ = " ".join(ctx.summary_text.split()).lower()
            in_leaf = " ".join(ctx.leaf_text.split()).lower()
            for f in facts:
                s_, l_ = f in in_summ, f in in_leaf
                if s_ or l_:
                    where["both" if s_ and l_ else "summ" if s_ else "leaf"] += 1
    n = len(questions)
    ms = (time.perf_counter() - t0) * 1000 / n
    has_ev = any(q.evidence for q in questions)
    ev = f"{evidence / with_ev:8.1%} {share / with_ev:8.1%}" if has_ev else f"{'-':>8} {'-':>8}"
    loc = "/".join(str(where[k]) for k in ("summ", "leaf", "both")) if has_ev else "-"
    rep = f"{both / n:9.1%}" if any(len(q.gold_sources) == 2 for q in questions) else f"{'-':>9}"
    return (
        f"{hit / n:7.1%} {rep} {ev} {loc:>18} {summ / n:8.1%} {tokens / n:7.0f} {read / n:8.0f}"
        f" {ms:8.1f}"
    )


def llm_cost(
    store: NodeStore,
    embedder: Embedder,
    flt: SearchFilter,
    questions: list[Question],
    qvecs: object,
    max_tokens: int,
) -> None:
    """postQFRAP(leaves) with SmolLM2 on a local llama.cpp server: cost per query."""
    import openai

    from ingestor.summarize.openai_compat import OpenAISummarizer
    from testkit.servers import running_llm_server

    with running_llm_server(n_ctx=8192, parallel=2) as server:
        client = openai.OpenAI(api_key="none", base_url=server.base_url, max_retries=0)
        llm = OpenAISummarizer(client, server.model, concurrency=2, timeout=300.0)
        run = postqfrap_mode(store, embedder, flt, "leaves", max_tokens, llm)
        seconds, calls, hit = [], [], 0
        for q, v in zip(questions, qvecs, strict=False):  # type: ignore[call-overload]
            t0 = time.perf_counter()
            ctx = run(q.text, v)
            seconds.append(time.perf_counter() - t0)
            calls.append(ctx.calls)
            hit += any(a.lower() in ctx.text.lower() for a in q.answers)
            print(  # one line per question: a long run cut short still says what it measured
                f"    {len(seconds)}/{len(questions)}: {seconds[-1]:.1f} s, {ctx.calls} calls, "
                f"{llm.prompt_tokens + llm.completion_tokens} tokens so far",
                file=sys.stderr,
                flush=True,
            )
        n = len(questions)
        print(
            f"  postqfrap(leaves) with {server.model} (SmolLM2-135M, llama.cpp, 1 thread, 2 slots) "
            f"on {n} questions: {statistics.mean(seconds):.1f} s/query (p50 "
            f"{statistics.median(seconds):.1f}, max {max(seconds):.1f}), "
            f"{statistics.mean(calls):.1f} summariser calls/query, "
            f"{llm.prompt_tokens / n:.0f} prompt + {llm.completion_tokens / n:.0f} completion "
            f"tokens/query; answer in ctx {hit / n:.0%} (a 135M model: not a quality figure)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--articles", type=int, default=24)
    ap.add_argument("--questions", type=int, default=0, help="SQuAD questions, spread (0 = all)")
    ap.add_argument("--max-tokens", default="2000", help="context budgets, e.g. 2000,1000,500")
    ap.add_argument("--skip-squad", action="store_true")
    ap.add_argument("--skip-hotpot", action="store_true")
    ap.add_argument("--skip-quality", action="store_true", help="skip the QuALITY story")
    ap.add_argument("--skip-cinderella", action="store_true", help="skip the Cinderella tale")
    ap.add_argument(
        "--llm-summaries", action="store_true", help="trees summarised by the local SmolLM2"
    )
    ap.add_argument("--llm", type=int, default=0, help="HotpotQA questions with the local LLM")
    ap.add_argument("--only-llm", action="store_true", help="HotpotQA: skip the offline modes")
    ap.add_argument("--fusions", default="dbsf", help="hybrid fusions tried (first: the others')")
    ap.add_argument("--no-postqfrap", action="store_true", help="skip the postQFRAP modes")
    ap.add_argument("--hotpot-questions", type=int, default=0, help="HotpotQA questions (0: all)")
    ap.add_argument(
        "--locomo",
        type=Path,
        help="LoCoMo's locomo10.json (github.com/snap-research/LoCoMo, data/; not shipped)",
    )
    ap.add_argument("--locomo-categories", default="1,2,3,4", help="1 multi-hop ... 4 single-hop")
    ap.add_argument("--locomo-questions", type=int, default=0, help="LoCoMo questions (0: all)")
    args = ap.parse_args()
    fusions = tuple(parse_fusion(f) for f in args.fusions.split(","))
    budgets = tuple(int(b) for b in args.max_tokens.split(","))
    extra: dict[str, Any] = {"fusions": fusions, "with_postqfrap": not args.no_postqfrap}
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp_s, ExitStack() as stack:
        tmp = Path(tmp_s)
        if args.llm_summaries:  # every tree's summaries by SmolLM2 on a local llama.cpp server
            from testkit.servers import running_llm_server

            server = stack.enter_context(running_llm_server(n_ctx=8192, parallel=2))
            extra["summary"] = {
                "backend": "openai",
                "openai": {
                    "base_url": server.base_url,
                    "model": server.model,
                    "api_key": "none",
                    "concurrency": 2,
                    "timeout": 600,
                },
            }
        if not args.skip_squad:
            _, qs = squad_folder(tmp / "squad", squad_titles()[: args.articles])
            evaluate("squad", tmp / "squad", sample(qs, args.questions), tmp, budgets, 0, **extra)
        if not args.skip_quality:
            _, qq = quality_folder(tmp / "quality")
            evaluate("quality", tmp / "quality", qq, tmp, budgets, 0, **extra)
        if not args.skip_cinderella:
            _, cq = cinderella_folder(tmp / "cinderella")
            evaluate("cinderella", tmp / "cinderella", cq, tmp, budgets, 0, **extra)
        if not args.skip_hotpot:
            _, hq = hotpot_folder(tmp / "hotpot")
            hq = sample(hq, args.hotpot_questions)
            evaluate("hotpotqa", tmp / "hotpot", hq, tmp, budgets, args.llm, args.only_llm, **extra)
        if args.locomo is not None:
            cats = tuple(int(c) for c in args.locomo_categories.split(","))
            _, lq = locomo_folder(tmp / "locomo", args.locomo, cats)
            lq = sample(lq, args.locomo_questions)
            evaluate("locomo", tmp / "locomo", lq, tmp, budgets, 0, **extra)
    print(f"peak RSS {peak_rss_mb():.0f} MiB")


if __name__ == "__main__":
    main()
