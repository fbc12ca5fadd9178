"""Long-life soak of adRAP (issue 8): thousands of random operations, invariants after every batch.

A seeded random sequence of operations on a folder, in batches of 1 to 50: add a document, edit
one (a few sentences replaced), remove, rename or move one, add or remove a whole folder of
documents. Documents are cut from the SQuAD articles (one to three consecutive paragraphs) or
generated. Each batch goes through the Pipeline API as one adRAP update, with the real
TreeClusterer, the real embedded store (qdrant-edge) and drift-triggered rebuilds off, so adRAP
alone carries the tree. After every batch: the tree invariants (ingestor.tree.invariants), store
ids == state ids, stored parents/children == the state's, sources == the files on disk. At the
end, against a full rebuild of the final folder: ARI of the leaves' layer-1 memberships, the
cluster-size distribution, and collapsed-tree answer recall (2,000 tokens) on the SQuAD questions
whose paragraph is in the final folder unedited.

Vectors are hashed (384-d bag of words, fast) unless --real-embeddings (all-MiniLM-L6-v2).

Partial repairs of drifted subtrees (issue 55, ingestor/tree/repair.py) run after every batch, as
the daemon runs them when idle (one region at a time), each batch counting --batch-seconds on the
repair budget's clock; the budget per hour spreads --repair-share of the first build's summary
tokens over the soak's expected length, at least an hour (0: no repair). At the end: the
repairs' tokens against a full rebuild's (target <= 0.3x), with the ARI and recall above.

    python bench/soak.py [--ops 5000] [--seed 0] [--real-embeddings] [--summarizer extractive|echo]
                         [--repair-share 0.3] [--repair-drift 0.5] [--repair-max-leaves 2000]
    python bench/soak.py --daemon [--ops 150] [--max-batch 10]

--daemon drives a running `adrap watch` (default settings: the packaged embedding model, extractive
summaries; drift rebuilds off) by editing the folder on disk; after each batch it waits until the
committed state lists exactly the files on disk, then checks the tree invariants on it and reads
every point of the daemon's store through its Qdrant REST facade with qdrant-client (store ids,
parents and children == the state's); store ids == state ids again once the daemon has exited. At
the end it compares the daemon's tree with `adrap build` of the final folder (ARI, cluster sizes,
answer recall; --questions 0 skips it).

The short version runs in the test suite (tests/unit/tree/test_soak.py); the parts it shares
with this script are testkit/soak.py and testkit/soak_ops.py.
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
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingestor.cluster.layer_state import REFIT_SHARE
from ingestor.pipeline.repair import run_repairs
from ingestor.tree.repair import RepairParams
from retriever import Embedder
from testkit.soak import compare_with_rebuild, daemon_soak, report
from testkit.soak_ops import Corpus, Soak, check, make_pipeline, rss_mb


def _embedder(real: bool) -> Embedder:
    if real:
        from retriever.in_process import in_process

        return in_process()
    from testkit.fakes import HashEmbedder

    return HashEmbedder(dim=384)


def _summarizer(name: str) -> Any:
    if name == "echo":
        from testkit.fakes import EchoSummarizer

        return EchoSummarizer()
    from ingestor.summarize.extractive import ExtractiveSummarizer

    return ExtractiveSummarizer()


class Repairs:
    """Runs the due partial repairs after each batch (one region, as the daemon when idle) on a
    clock of ``batch_seconds`` a batch, checks every invariant after each, and counts them."""

    def __init__(self, params: RepairParams, batch_seconds: float) -> None:
        self.params, self.batch_seconds = params, batch_seconds
        self.now = time.time()
        self.done = self.leaves = self.regenerated = self.tokens = 0
        self.seconds = 0.0

    def __call__(self, s: Soak) -> None:
        self.now += self.batch_seconds
        if self.params.tokens_per_hour <= 0:
            return
        p = s.p
        assert p is not None
        t0 = time.perf_counter()
        run = run_repairs(p.context, p.require_state(), self.params, now=self.now, limit=1)
        self.seconds += time.perf_counter() - t0
        if run.done:
            self.done += len(run.done)
            self.leaves += sum(r.leaves for r in run.done)
            self.regenerated += sum(r.stats.summaries_regenerated for r in run.done)
            self.tokens += run.tokens
            s.stats.checks += check(p, s.root)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ops", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs", type=int, default=150, help="documents in the folder at the start")
    ap.add_argument("--max-batch", type=int, default=50)
    ap.add_argument("--real-embeddings", action="store_true")
    ap.add_argument("--summarizer", choices=["extractive", "echo"], default="extractive")
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--progress", type=int, default=500, help="print a line every N operations")
    ap.add_argument(
        "--reference-seed",
        type=int,
        default=1,
        help="also rebuild with this clusterer seed: the ARI two rebuilds reach (-1: skip)",
    )
    ap.add_argument("--daemon", action="store_true", help="drive `adrap watch` (fewer ops)")
    ap.add_argument(
        "--repair-share",
        type=float,
        default=0.3,
        help="repairs' budget over the soak, a share of the first build's summary tokens (0: off)",
    )
    ap.add_argument(
        "--refit-share",
        type=float,
        default=REFIT_SHARE,
        help="ADRAP_ADRAP__REFIT_SHARE: a group is refitted past this share of changed points",
    )
    ap.add_argument("--repair-drift", type=float, default=0.5, help="ADRAP_ADRAP__REPAIR_DRIFT")
    ap.add_argument("--repair-max-leaves", type=int, default=2000)
    ap.add_argument("--batch-seconds", type=float, default=60.0, help="repair clock per batch")
    ap.add_argument(
        "--held-rows",
        type=int,
        default=None,
        help="the daemon's ADRAP_WATCH__MAX_HELD_ROWS (0: it drops what it holds after every batch)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.daemon:
        return daemon_soak(
            args.ops,
            args.max_batch,
            args.seed,
            args.docs,
            questions=args.questions,
            progress=args.progress,
            held_rows=args.held_rows,
        )
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        root = tmp / "folder"
        summarizer = _summarizer(args.summarizer)
        p = make_pipeline(
            tmp / "state",
            _embedder(args.real_embeddings),
            summarizer,
            refit_share=args.refit_share,
        )
        corpus = Corpus(rng)
        soak = Soak(p, root, corpus, rng)
        soak.seed_folder(args.docs)
        t0 = time.perf_counter()
        built = p.build(root).stats
        build_tokens = max(built.summary_tokens, built.summary_input_tokens)
        state = p.require_state()
        print(
            f"start: {len(state.sources)} documents, {len(state.ids_in_layer(0))} leaves, "
            f"layers {state.layer_counts()}, built in {time.perf_counter() - t0:.0f}s"
        )
        check(p, root)
        soak.stats.rss_after_build_mb = rss_mb()
        next_print = args.progress

        def progress(s: Soak) -> None:
            nonlocal next_print
            done = sum(s.stats.ops.values())
            if done >= next_print:
                next_print += args.progress
                st = p.require_state()
                print(
                    f"  {done:>6} ops {s.stats.batches:>4} batches "
                    f"{done / max(s.stats.update_seconds, 1e-9):6.1f} ops/s "
                    f"{done / max(s.stats.update_cpu, 1e-9):6.1f} ops/cpu-s "
                    f"layers {st.layer_counts()} rss {rss_mb():.0f} MiB",
                    flush=True,
                )

        hours = args.ops / ((args.max_batch + 1) / 2) * args.batch_seconds / 3600
        repair = RepairParams(
            args.repair_drift,
            int(args.repair_share * build_tokens / max(hours, 1.0)),  # the soak's total too
            args.repair_max_leaves,
        )
        repairs = Repairs(repair, args.batch_seconds)

        def on_batch(s: Soak) -> None:
            repairs(s)
            progress(s)

        t0 = time.perf_counter()
        stats = soak.run(args.ops, args.max_batch, on_batch)
        wall = time.perf_counter() - t0
        stats.rss_end_mb = rss_mb()
        state = p.require_state()
        n_ops = sum(stats.ops.values())
        print(f"operations: {n_ops} in {stats.batches} batches ({dict(stats.ops)})")
        print(
            f"  {n_ops / stats.update_seconds:.1f} ops/s through Pipeline.update "
            f"({n_ops / stats.update_cpu:.1f} ops per CPU second; {stats.update_seconds:.0f}s "
            f"updating, {stats.update_cpu:.0f}s CPU, {stats.check_seconds:.0f}s checking, "
            f"{wall:.0f}s wall)"
        )
        print(
            f"  invariant checks passed: {stats.checks} ({stats.batches} batches x 4 families: "
            "tree invariants, store ids, stored links, sources == files)"
        )
        print(
            f"  summaries regenerated {stats.summaries} ({stats.summary_tokens} tokens; refit "
            f"share {args.refit_share}), clusters split {stats.splits}, "
            f"layers added {stats.layers_added} / dropped {stats.layers_dropped}, "
            f"deepest {stats.max_depth}"
        )
        print(
            f"end: {len(state.sources)} documents, {len(state.ids_in_layer(0))} leaves, "
            f"layers {state.layer_counts()}"
        )
        cmp = compare_with_rebuild(
            p,
            root,
            tmp / "rebuild",
            corpus,
            _summarizer(args.summarizer),
            args.questions,
            rng,
            reference_seed=None if args.reference_seed < 0 else args.reference_seed,
        )
        reference = (
            f" (a rebuild with seed {args.reference_seed} against it: {cmp.ari_reference:.3f})"
            if cmp.ari_reference is not None
            else ""
        )
        report(cmp, "adRAP", "a full rebuild", reference)
        print(
            f"  partial repairs (drift > {repair.threshold}, {repair.tokens_per_hour} tokens an "
            f"hour, {args.batch_seconds:.0f} s a batch): {repairs.done} repairs, "
            f"{repairs.leaves} leaves re-clustered, {repairs.regenerated} summaries regenerated, "
            f"{repairs.tokens} tokens = {repairs.tokens / max(1, cmp.rebuild_tokens):.3f}x a full "
            f"rebuild's {cmp.rebuild_tokens} (target <= 0.3x; the first build's {build_tokens}); "
            f"{repairs.seconds:.0f}s; full rebuilds triggered: 0"
        )
        print(
            f"RSS after build {stats.rss_after_build_mb:.0f} MiB, at end {stats.rss_end_mb:.0f} "
            f"MiB; peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )
        p.context.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
