"""What a moved folder costs: its files keep their places in the tree, against removing and placing
them again (what adrap did before), from the same built tree.

The SQuAD part-A articles cut into documents of ``--paragraphs`` paragraphs, one folder per
article; then ``--moves`` times, a random article's folder is renamed and the update applied as
the daemon applies it (``Pipeline.update`` of both ends). Printed per way: wall seconds per move,
summaries regenerated and the summariser's input tokens (what an LLM bills), texts embedded, and
the points written and deleted. **Floor**: the points a move must write (its leaves under their
new ids, and the ancestors whose files changed), upserted alone, timed. Hashed 384-d embeddings
(a move embeds nothing either way: the old way took the removed leaves' vectors back) and the
extractive summariser wrapped to count its input; summary cache on, as in the daemon.

    python bench/moves.py [--moves 10] [--paragraphs 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datasets import SQUAD, peak_rss_mb
from update import CountingSummarizer, pipeline

from ingestor.pipeline import Pipeline
from ingestor.pipeline.moves import MoveFinder
from ingestor.tree.invariants import violations
from testkit.fakes import HashEmbedder


class CountingHashEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(dim=384)
        self.texts = 0

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        self.texts += len(texts)
        return super().embed_documents(texts)


def write_folder(root: Path, per_doc: int) -> int:
    data = json.loads(SQUAD.read_text())["data"]
    n = 0
    for i, article in enumerate(data):
        folder = root / f"a{i:02d}"
        folder.mkdir(parents=True)
        paras = [p["context"] for p in article["paragraphs"]]
        for j in range(0, len(paras), per_doc):
            (folder / f"part{j // per_doc:03d}.txt").write_text("\n\n".join(paras[j : j + per_doc]))
            n += 1
    return n


def run(
    p: Pipeline,
    summ: CountingSummarizer,
    emb: CountingHashEmbedder,
    root: Path,
    moves: int,
    seed: int,
    label: str,
) -> None:
    rng = random.Random(seed)
    store = p.context.store
    walls, calls, tokens, embedded, written, deleted, floors = [], [], [], [], [], [], []
    for k in range(moves):
        old = rng.choice(sorted(d for d in root.iterdir() if d.is_dir()))
        new = root / f"moved{k:03d}-{old.name}"
        c0, t0, e0 = summ.calls, summ.input_tokens, emb.texts
        old.rename(new)
        start = time.perf_counter()
        report = p.update([old, new])
        walls.append(time.perf_counter() - start)
        calls.append(summ.calls - c0)
        tokens.append(summ.input_tokens - t0)
        embedded.append(emb.texts - e0)
        stats = report.stats
        ids = sorted(stats.upserted) if stats is not None else []
        written.append(len(ids))
        deleted.append(len(stats.deleted) if stats is not None else 0)
        state = p.require_state()
        must = [i for i in ids if i in state.nodes]
        start = time.perf_counter()
        store.upsert(state.payloads(must), state.matrix(must))
        floors.append(time.perf_counter() - start)
    state = p.require_state()
    bad = violations(state)
    med = statistics.median
    print(
        f"  {label:<22} wall/move {med(walls):6.3f} s (max {max(walls):.3f}), "
        f"summaries {sum(calls):5d} ({med(calls):g}/move), summariser input {sum(tokens):8,d} "
        f"tokens, embedded {sum(embedded):5d}, points written {sum(written):6d}, deleted "
        f"{sum(deleted):5d}; floor {med(floors):.3f} s/move = {med(walls) / max(med(floors), 1e-9):.1f}x; "
        f"invariants {'ok' if not bad else bad[:2]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moves", type=int, default=10)
    ap.add_argument("--paragraphs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="adrap-moves-") as tmp_:
        tmp = Path(tmp_)
        root = tmp / "share"
        n = write_folder(root, args.paragraphs)
        summ = CountingSummarizer()
        p = pipeline(tmp / "a", CountingHashEmbedder(), summ)
        t0 = time.perf_counter()
        p.build(root)
        state = p.require_state()
        print(
            f"{n} files in {len(list(root.iterdir()))} folders: {state.layer_counts()} nodes per "
            f"layer, built in {time.perf_counter() - t0:.1f} s ({summ.calls} summaries, "
            f"{summ.input_tokens:,d} input tokens)"
        )
        p.context.store.close()
        shutil.copytree(root, tmp / "pristine")
        for label, keep in (("kept in place (now)", True), ("removed and placed", False)):
            work = tmp / label.split()[0]
            shutil.copytree(tmp / "a", work / "a")
            shutil.rmtree(root)  # the tree's root is where it was built: the share goes back there
            shutil.copytree(tmp / "pristine", root)
            qs, qe = CountingSummarizer(), CountingHashEmbedder()
            q = pipeline(work / "a", qe, qs)
            take = MoveFinder.take
            if not keep:
                MoveFinder.take = lambda *_: None  # type: ignore[method-assign]
            try:
                run(q, qs, qe, root, args.moves, args.seed, label)
            finally:
                MoveFinder.take = take  # type: ignore[method-assign]
                q.context.store.close()
        print(f"peak RSS {peak_rss_mb():.0f} MiB")


if __name__ == "__main__":
    main()
