"""adRAP update benchmark.

Part 1, the paper's protocol on the 24 SQuAD articles: a full tree on the first 70 % of articles,
then the remaining 30 % added one article at a time with adRAP, against (a) the full tree built on
100 % and (b) the greedy variant (most probable cluster, no GMM update). For each: wall time (with
embeddings cached, so the clustering/summary work is what is compared), summary calls, summariser
input tokens, adjusted Rand index of the leaves' layer-1 memberships against (a), and answer recall
of the collapsed tree at 2000 tokens. Drift-triggered rebuilds are disabled to measure adRAP itself.

Part 2, per-document cost: one ~5-chunk document added, one removed, one edited, in trees of 2k and
20k leaves (hashed 384-d embeddings, extractive summaries), against a full rebuild of the layers.
It also reports, per operation, the summaries regenerated and the summariser's input tokens, with
their ratio to the changed document's own tokens and to the floor (bench/floor.py: the summaries
of the clusters whose hard memberships the change touched, up the ancestors).

    python bench/update.py [--part 1|2|all] [--sizes 2000 20000] [--repeats 3] [--no-rebuild]
        [--keep DIR] [--max-group N] [--warm] [--daemon-path] [--min-change F] [--soft-margin F]
        [--workers N]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from datasets import SQUAD, peak_rss_mb, squad_folder, squad_titles
from floor import floor
from numpy.typing import NDArray
from sklearn.metrics import adjusted_rand_score

from ingestor.cluster.two_step import TreeClusterer
from ingestor.config import MAX_HELD_ROWS, AdrapSettings, SummarySettings
from ingestor.pipeline import Pipeline, UpdateReport
from ingestor.read.tokens import default_tokenizer
from ingestor.summarize.extractive import ExtractiveSummarizer
from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.persist import shed_rows
from ingestor.tree.state import TreeState
from models_store import ModelStore
from retriever import SearchFilter, collapsed_tree
from retriever.edge_store import EdgeNodeStore
from retriever.heap import release_freed_heap

#: The floor rules of the benchmark's trees (``--min-change``, ``--soft-margin``; the daemon's) and
#: the groups' refit share (``--refit-share``).
RULES: dict[str, float] = {}


class CachedEmbedder:
    """Wraps an embedder so that repeated texts are embedded once across the compared variants."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.model_id = inner.model_id  # type: ignore[attr-defined]
        self.dim = inner.dim  # type: ignore[attr-defined]
        self.cache: dict[str, NDArray[np.float32]] = {}
        self.seconds = 0.0

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            t0 = time.perf_counter()
            for t, v in zip(missing, self.inner.embed_documents(missing), strict=True):  # type: ignore[attr-defined]
                self.cache[t] = v
            self.seconds += time.perf_counter() - t0
        return (
            np.stack([self.cache[t] for t in texts])
            if texts
            else np.zeros((0, self.dim), np.float32)
        )

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.embed_documents([text])[0]


class CountingSummarizer:
    """Extractive summaries, counting calls and input tokens."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.id = self.inner.id
        self.prompt_version = self.inner.prompt_version
        self.calls = 0
        self.input_tokens = 0
        self.cpu = 0.0
        self.tok = default_tokenizer()

    def summarize_many(self, groups, *, max_tokens, query=None, mapper=None):  # type: ignore[no-untyped-def]
        c0 = cpu()  # with a mapper (--workers), the workers' CPU is not counted
        self.calls += len(groups)
        self.input_tokens += sum(len(self.tok.encode(t)) for g in groups for t in g)
        try:
            return self.inner.summarize_many(
                groups, max_tokens=max_tokens, query=query, mapper=mapper
            )
        finally:
            self.cpu += cpu() - c0


#: Global-cluster bound of the benchmark's trees (``--max-group``; the clusterer's default).
MAX_GROUP: int | None = TreeClusterer().max_group
WORKERS = 1  # build worker processes of the benchmark's trees (bench/memory.py --workers)


def pipeline(tmp: Path, embedder: object, summarizer: object, *, greedy: bool = False) -> Pipeline:
    builder = TreeBuilder(
        embedder,  # type: ignore[arg-type]
        summarizer,  # type: ignore[arg-type]
        lambda: TreeClusterer(random_state=0, max_group=MAX_GROUP, workers=WORKERS),
        TreeParams(greedy=greedy, **RULES),
        workers=WORKERS,
    )
    return Pipeline(
        tree="default",
        embedder=embedder,  # type: ignore[arg-type]
        builder=builder,
        store=EdgeNodeStore(tmp / "qdrant"),
        models=ModelStore(tmp / "models"),
        drift_threshold=1e9,
    )


def layer1_labels(p: Pipeline) -> dict[str, str]:
    state = p.require_state()
    return {i: min(n.parents) if n.parents else i for i, n in state.nodes.items() if n.layer == 0}


def recall(p: Pipeline, qvecs: NDArray[np.float32], answers: list[tuple[str, ...]]) -> float:
    hit = 0
    for v, ans in zip(qvecs, answers, strict=True):
        text = " ".join(
            h.node.text for h in collapsed_tree(p.context.store, v, SearchFilter(tree="default"))
        ).lower()
        hit += any(a.lower() in text for a in ans)
    return hit / len(answers)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def part1(tmp: Path) -> None:
    from retriever.embedding import SentenceTransformerEmbedder

    emb = CachedEmbedder(SentenceTransformerEmbedder())
    titles = squad_titles()
    cut = round(len(titles) * 0.7)
    corpus = tmp / "squad"
    files, questions = squad_folder(corpus, titles)
    late = files[cut:]
    # Hide the last 30 % while building on the first 70 %.
    hidden = tmp / "hidden"
    hidden.mkdir()
    for f in late:
        f.rename(hidden / f.name)
    qvecs = emb.embed_documents([q.text for q in questions])
    answers = [q.answers for q in questions]
    print(
        f"SQuAD: {cut} articles built first, {len(late)} added one at a time; {len(questions)} questions"
    )
    rows = []
    for name, greedy in (("adRAP", False), ("greedy", True)):
        for f in late:
            if f.exists():
                f.rename(hidden / f.name)
        s = CountingSummarizer()
        p = pipeline(tmp / name, emb, s, greedy=greedy)
        p.build(corpus)
        b_calls, b_tok = s.calls, s.input_tokens
        t0, c0 = time.perf_counter(), cpu()
        for f in late:
            (hidden / f.name).rename(f)
            p.update([f])
        rows.append(
            (
                name,
                time.perf_counter() - t0,
                cpu() - c0,
                s.calls - b_calls,
                s.input_tokens - b_tok,
                p,
            )
        )
    s = CountingSummarizer()
    full = pipeline(tmp / "full", emb, s)
    t0, c0 = time.perf_counter(), cpu()
    full.build(corpus)
    full_row = (
        "full rebuild on 100 %",
        time.perf_counter() - t0,
        cpu() - c0,
        s.calls,
        s.input_tokens,
        full,
    )
    ref = layer1_labels(full)
    head = ("variant", "wall s", "cpu s", "summaries", "sum. in tok", "ARI vs full", "recall@2000")
    print(f"  {head[0]:<24} " + " ".join(f"{h:>11}" for h in head[1:]))
    for name, wall, cpu_s, calls, tok, p in [*rows, full_row]:
        labels = layer1_labels(p)
        common = sorted(set(ref) & set(labels))
        ari = adjusted_rand_score([ref[i] for i in common], [labels[i] for i in common])
        rec = recall(p, qvecs, answers)
        print(
            f"  {name:<24} {wall:11.1f} {cpu_s:11.1f} {calls:11d} {tok:11d} {ari:11.3f} {rec:11.1%}"
        )
        p.context.store.close()
    print(
        f"  (embedding time, cached across variants and not in the wall column: {emb.seconds:.0f}s)"
    )


def synthetic_docs(
    root: Path, n_leaves: int, rng: random.Random, *, write: bool = True
) -> list[str]:
    import json

    sentences = [
        s.strip() + "."
        for a in json.loads(SQUAD.read_text())["data"]
        for p in a["paragraphs"]
        for s in p["context"].split(". ")
        if len(s) > 40
    ]
    if not write:
        return sentences
    root.mkdir(parents=True, exist_ok=True)
    n_docs = max(1, n_leaves // 5)
    for d in range(n_docs):
        start = rng.randrange(len(sentences) - 40)
        (root / f"doc{d:05d}.txt").write_text(" ".join(sentences[start : start + 40]))
    return sentences


class TimedEmbedder:
    """Hashed embeddings, counting the CPU seconds spent embedding (excluded from update cost)."""

    def __init__(self, dim: int) -> None:
        from testkit.fakes import HashEmbedder

        self.inner = HashEmbedder(dim=dim)
        self.model_id = self.inner.model_id
        self.dim = dim
        self.cpu = 0.0

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        c0 = cpu()
        try:
            return self.inner.embed_documents(texts)
        finally:
            self.cpu += cpu() - c0

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.inner.embed_query(text)


def state_bytes(p: Pipeline) -> int:
    from ingestor.tree.persist import state_path

    path = state_path(p.context.models, p.context.tree)
    return sum(f.stat().st_size for f in path.parent.glob(path.name + "*"))


def resident_fraction(path: Path) -> float:
    """Return the fraction of ``path``'s pages in the OS page cache (``fincore``), or NaN."""
    import subprocess

    try:
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return int(out[0]) / max(1, int(out[1]))
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return float("nan")


def warm(path: Path) -> None:
    """Read the state database once, so its pages are in the OS page cache as in a running
    daemon's steady state (a cold cache adds the disk reads of every row an update touches)."""
    for f in path.parent.glob(path.name + "*"):
        with f.open("rb") as fh:
            while fh.read(1 << 24):
                pass


def apply_one(p: Pipeline, held: TreeState | None, path: Path) -> UpdateReport:
    """One update of ``path``: as the daemon does to the state it holds (dropping the rows it
    holds past ``watch.max_held_rows``), or as the CLI does."""
    if held is None:
        return p.update([path])
    report = UpdateReport()
    docs, gone = p.collect(held, [path], report)
    p.apply_batch(held, docs, gone, report)
    if shed_rows(held, MAX_HELD_ROWS):
        release_freed_heap()
    return report


def part2(
    tmp: Path,
    sizes: list[int],
    repeats: int,
    *,
    rebuild: bool = True,
    warm_cache: bool = False,
    daemon_path: bool = False,
) -> None:
    """Per one-document update: CPU excluding embedding and summary generation, state bytes."""
    print(
        "per-document update cost (hashed 384-d embeddings, extractive summaries; cpu s excludes "
        f"embedding and summary generation; median of {repeats}):"
    )
    print(
        f"  {'leaves':>7} {'operation':<10} {'wall s':>7} {'cpu s':>7} {'summaries':>9} "
        f"{'state KB written':>16} {'cpu mean':>8} {'p90':>6} {'ms/summary':>10}"
    )
    first: dict[str, float] = {}
    for size in sizes:
        rng = random.Random(0)
        root = tmp / f"synthetic{size}"
        built = (tmp / f"s{size}" / "models").exists()  # --keep: a tree built by an earlier run
        sentences = synthetic_docs(root, size, rng, write=not built)
        s = CountingSummarizer()
        emb = TimedEmbedder(384)
        p = pipeline(tmp / f"s{size}", emb, s)
        t0, c0 = time.perf_counter(), cpu()
        if not built:
            p.build(root)
        state = p.require_state()
        wall, cpu_s = time.perf_counter() - t0, cpu() - c0
        n_leaves = state.layer_counts().get(0, 0)
        what = "build" if not built else "reused"
        print(f"  {n_leaves:>7} {what:<10} {wall:7.1f} {cpu_s:7.1f} {s.calls:9d}", flush=True)
        from ingestor.tree.persist import state_path

        db = state_path(p.context.models, p.context.tree)
        if warm_cache:
            warm(db)
        print(
            f"  state database in the page cache: {100 * resident_fraction(db):.0f} %", flush=True
        )
        # The daemon keeps one state across batches (its decoded rows stay in memory); the CLI
        # (`adrap add` / `remove`, ``Pipeline.update``) opens the committed state every time.
        held = p.require_state(recover=True) if daemon_path else None

        print(
            f"  path: {'daemon (one state held)' if daemon_path else 'CLI (state opened per update)'}"
        )
        names = random.Random(time.time_ns())  # new names: a reused tree has the old ones
        docs = sorted(root.glob("doc*.txt"))
        if len(docs) < 2 * repeats:  # each repeat removes one document and edits another
            raise SystemExit(
                f"--repeats {repeats} needs {2 * repeats} documents and {root} holds {len(docs)}:"
                f" pass --repeats {len(docs) // 2} or fewer"
            )
        results: dict[str, list[tuple[float, float, int, int]]] = {}
        costs: dict[str, list[tuple[int, int, int, int, int]]] = {}  # see print_costs
        # A reused tree holds the texts earlier runs added: this run's come after them (the same
        # at every size), never again (a second run re-added the first one's documents).
        done = len(list(root.glob("zz-new*.txt")))
        if done:
            print(f"  {done} documents added by earlier runs: this run adds the next {repeats}")
        for k in range(repeats):
            victim, edited = docs[2 * k], docs[2 * k + 1]
            new = root / f"zz-new{k}-{names.randrange(10**9)}.txt"
            # The same added text and edit at every size: the cost of an update follows how many
            # summaries it regenerates, which depends on the document; like is compared with like.
            text_rng = random.Random(1000 + done + k)
            for name in ("add", "remove", "edit"):
                path = {"add": new, "remove": victim, "edit": edited}[name]
                probe = FloorProbe(held or p.require_state(), path, gone=name == "remove")
                before, e0, s0, i0 = s.calls, emb.cpu, s.cpu, s.input_tokens
                t0, c0 = time.perf_counter(), cpu()
                if name == "add":
                    new.write_text(" ".join(text_rng.sample(sentences, 40)))
                    report = apply_one(p, held, new)
                elif name == "remove":
                    victim.unlink()
                    report = apply_one(p, held, victim)
                else:
                    text = edited.read_text()
                    edited.write_text(text + " " + " ".join(text_rng.sample(sentences, 8)))
                    report = apply_one(p, held, edited)
                wall = time.perf_counter() - t0
                cpu_s = cpu() - c0 - (emb.cpu - e0) - (s.cpu - s0)
                results.setdefault(name, []).append(
                    (wall, cpu_s, s.calls - before, report.state_bytes)
                )
                fl = probe.after(held or p.require_state())
                doc = len(s.tok.encode(path.read_text() if path.exists() else probe.text))
                costs.setdefault(name, []).append(
                    (s.calls - before, s.input_tokens - i0, doc, len(fl), sum(fl.values()))
                )
        for name, rows in results.items():
            wall, cpu_s, calls, written = (float(np.median([r[i] for r in rows])) for i in range(4))
            cpus = [r[1] for r in rows]
            # The cost of an update follows how many summaries it regenerates (soft clusters fan
            # out: 20-100 for one document), so medians of a few updates are noisy: the mean,
            # the p90 and the CPU per regenerated summary say more.
            per_summary = 1000 * sum(cpus) / max(1, sum(r[2] for r in rows))
            mean = float(np.mean(cpus))
            first.setdefault(name, cpu_s)
            first.setdefault(name + " mean", mean)
            first.setdefault(name + " per summary", per_summary)
            print(
                f"  {'':>7} {name:<10} {wall:7.2f} {cpu_s:7.3f} {calls:9.0f} {written / 1024:16.1f}"
                f" {mean:8.3f} {float(np.percentile(cpus, 90)):6.3f} {per_summary:10.1f}"
                f"   (x{cpu_s / first[name]:.2f} median, x{mean / first[name + ' mean']:.2f} mean,"
                f" x{per_summary / first[name + ' per summary']:.2f} per summary of the smallest tree)"
            )
        print_costs(costs)
        if not rebuild:
            print(
                f"  state database on disk: {state_bytes(p) / 1e6:.1f} MB; peak RSS "
                f"{peak_rss_mb():.0f} MiB"
            )
            p.context.store.close()
            continue
        state = p.require_state()
        before = s.calls
        t0, c0 = time.perf_counter(), cpu()
        builder = p.context.builder
        builder.summaries.summarize_groups = _uncached(builder.summaries.summarize_groups)  # type: ignore[method-assign]
        builder.build(state)
        wall, cpu_s = time.perf_counter() - t0, cpu() - c0
        calls = s.calls - before
        per_doc = float(np.median([r[1] for r in results["add"]]))
        print(
            f"  {'':>7} {'rebuild':<10} {wall:7.1f} {cpu_s:7.1f} {calls:9d}  (layers only, no "
            f"cache; {cpu_s / max(per_doc, 1e-9):.0f}x a one-document add's cpu)"
        )
        print(
            f"  state database on disk: {state_bytes(p) / 1e6:.1f} MB; peak RSS {peak_rss_mb():.0f} MiB"
        )
        p.context.store.close()


class FloorProbe:
    """The floor of one document's change (bench/floor.py): its leaves' chains before the change
    (for the leaves it removes), then after it (for the leaves it adds)."""

    def __init__(self, state: TreeState, path: Path, *, gone: bool) -> None:
        self.key = path.name
        self.text = path.read_text() if path.exists() else ""
        entry = state.sources.peek(self.key)
        self.leaves = set(entry.node_ids) if entry is not None else set()
        drop = self.leaves if gone else ()
        self.chains = {leaf: floor(state, [leaf], gone=drop) for leaf in self.leaves}

    def after(self, state: TreeState) -> dict[str, int]:
        entry = state.sources.peek(self.key)
        now = set(entry.node_ids) if entry is not None else set()
        out = floor(state, now - self.leaves)
        for leaf in self.leaves - now:
            out.update(self.chains[leaf])
        return out


def print_costs(costs: dict[str, list[tuple[int, int, int, int, int]]]) -> None:
    """Per operation, medians of: summaries paid, summariser input tokens, their ratio to the
    document's tokens and to the floor's (summaries, tokens)."""
    print(
        f"  {'':>7} {'operation':<10} {'summaries':>9} {'in tokens':>9} {'doc tok':>7} "
        f"{'x doc':>6} {'floor n':>7} {'floor tok':>9} {'x floor':>7}   (medians; mean x doc)"
    )
    pooled = [r for op_rows in costs.values() for r in op_rows]
    for name, rows in [*costs.items(), ("all", pooled)]:
        calls, tok, doc, fn, ftok = (float(np.median([r[i] for r in rows])) for i in range(5))
        x_doc = float(np.median([r[1] / max(1, r[2]) for r in rows]))
        x_floor = float(np.median([r[1] / max(1, r[4]) for r in rows]))
        mean = float(np.mean([r[1] / max(1, r[2]) for r in rows]))
        print(
            f"  {'':>7} {name:<10} {calls:9.0f} {tok:9.0f} {doc:7.0f} {x_doc:6.1f} {fn:7.0f} "
            f"{ftok:9.0f} {x_floor:7.2f}   ({mean:.1f})"
        )


def _uncached(fn):  # type: ignore[no-untyped-def]
    """Make the builder summarise every cluster again (a rebuild that pays for every summary)."""

    def run(state, groups, stats, progress=None, layer=1):  # type: ignore[no-untyped-def]
        keys = list(state.summary_cache)
        for k in keys:
            del state.summary_cache[k]
        return (
            fn(state, groups, stats, layer=layer)
            if progress is None
            else fn(state, groups, stats, progress, layer)
        )

    return run


def main() -> None:
    global MAX_GROUP, WORKERS
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=["1", "2", "all"], default="all")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--repeats", type=int, default=3, help="one-document updates per operation")
    ap.add_argument(
        "--no-rebuild", action="store_true", help="skip the layers-only rebuild (long at 200k)"
    )
    ap.add_argument(
        "--keep",
        type=Path,
        help="build the trees in this folder and keep them; a later run reuses them (part 2)",
    )
    ap.add_argument(
        "--max-group",
        type=int,
        default=MAX_GROUP,
        help=f"the clusterer's global-cluster bound (default {MAX_GROUP}; 0: none)",
    )
    ap.add_argument(
        "--warm",
        action="store_true",
        help="read the state database into the page cache before the updates (a running "
        "daemon's steady state); without it a kept tree may be partly on disk only",
    )
    ap.add_argument(
        "--daemon-path",
        action="store_true",
        help="apply the updates as the daemon does, to one state held across them (default: as "
        "`adrap add` / `remove` do, opening the committed state each time)",
    )
    ap.add_argument(
        "--min-change",
        type=float,
        default=SummarySettings().min_change,
        help="a summary keeps its text while its children changed by less than this fraction "
        f"(default {SummarySettings().min_change}; 0: every change regenerates)",
    )
    ap.add_argument(
        "--soft-margin",
        type=float,
        default=SummarySettings().soft_margin,
        help=f"soft memberships this near the threshold change nothing (default "
        f"{SummarySettings().soft_margin})",
    )
    ap.add_argument(
        "--refit-share",
        type=float,
        default=AdrapSettings().refit_share,
        help="a group is clustered again once this share of it changed (default "
        f"{AdrapSettings().refit_share}, ADRAP_ADRAP__REFIT_SHARE)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=WORKERS,
        help=f"build worker processes of the trees (default {WORKERS}); updates run in one",
    )
    args = ap.parse_args()
    RULES.update(
        min_change=args.min_change, soft_margin=args.soft_margin, refit_share=args.refit_share
    )
    MAX_GROUP = args.max_group or None
    WORKERS = args.workers
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s) if args.keep is None else args.keep
        if args.part in ("1", "all"):
            part1(tmp)
        if args.part in ("2", "all"):
            part2(
                tmp,
                args.sizes,
                args.repeats,
                rebuild=not args.no_rebuild,
                warm_cache=args.warm,
                daemon_path=args.daemon_path,
            )
    print(f"peak RSS {peak_rss_mb():.0f} MiB")


if __name__ == "__main__":
    main()
