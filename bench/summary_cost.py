"""What keeping summaries current costs (issue 34): coalesced regeneration against paying at once.

A steady stream of single-document changes (adds, edits, removals, one a simulated minute) on the
SQuAD part-A articles cut into documents of a few paragraphs, three ways from the same built tree:

* **at once**: every update regenerates the summaries it touches (``ADRAP_SUMMARY__REFRESH_SECONDS=0``);
* **coalesced**: updates mark them stale and a refresh every ``--window`` changes pays for each once
  (the daemon's default: a 300 s window at one change a minute is 5 changes);
* **rebuild**: one full build of the final folder with an empty summary cache.

It prints, per mode, the summariser's input tokens (what an LLM bills most: the children's texts of
every summary paid for), summaries paid, the median per change and its ratio to the changed
document's own tokens, the ratio to one full rebuild, stale summaries left, and the collapsed
tree's answer recall at 2,000 tokens on the SQuAD questions (each mode's final tree; the rebuild's
is the reference), and the floor: the input tokens of the summaries any correct update must
regenerate (bench/floor.py), each read once per change (at once) or once per window
(coalesced), against the rebuild's. Real embeddings (all-MiniLM-L6-v2, each text embedded once for
all modes) and the extractive summariser wrapped to count its input; summary cache on, as in the
daemon.

    python bench/summary_cost.py [--changes 60] [--window 5] [--paragraphs 6]
        [--min-change F] [--soft-margin F]

``--min-change`` / ``--soft-margin``: the floor rules (ingestor.tree.tolerance; default
the daemon's, ADRAP_SUMMARY__MIN_CHANGE / __SOFT_MARGIN; 0 0: every change regenerates).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datasets import SQUAD, Question, peak_rss_mb
from update import RULES, CachedEmbedder, CountingSummarizer, FloorProbe, pipeline, recall

from ingestor.config import SummarySettings
from ingestor.read.tokens import default_tokenizer


def documents(dest: Path, per_doc: int) -> tuple[list[str], list[Question]]:
    """Cut each article into documents of ``per_doc`` paragraphs; return their texts (the files
    are written later) and the questions with answers."""
    data = json.loads(SQUAD.read_text())["data"]
    texts: list[str] = []
    questions = []
    for article in data:
        paras = [p["context"] for p in article["paragraphs"]]
        for i in range(0, len(paras), per_doc):
            texts.append("\n\n".join(paras[i : i + per_doc]) + "\n")
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                answers = tuple(dict.fromkeys(a["text"] for a in qa["answers"]))
                questions.append(Question(qa["question"], answers))
    dest.mkdir(parents=True, exist_ok=True)
    return texts, questions


def script(
    n_docs: int, n_changes: int, rng: random.Random
) -> tuple[list[int], list[tuple[str, int, int]]]:
    """The initial documents and the changes: (kind, document, paragraph donor)."""
    order = list(range(n_docs))
    rng.shuffle(order)
    held = order[: n_changes // 3 + 1]
    start = sorted(order[len(held) :])
    live = list(start)
    ops: list[tuple[str, int, int]] = []
    for i in range(n_changes):
        kind = ("add", "edit", "remove")[i % 3]
        if kind == "add":
            doc = held.pop()
            live.append(doc)
        elif kind == "edit":
            doc = rng.choice(live)
        else:
            doc = live.pop(rng.randrange(len(live)))
        ops.append((kind, doc, rng.randrange(n_docs)))
    return start, ops


def run_mode(
    name: str,
    tmp: Path,
    emb: CachedEmbedder,
    texts: list[str],
    start: list[int],
    ops: list[tuple[str, int, int]],
    window: int,
) -> dict[str, object]:
    tok = default_tokenizer()
    root = tmp / name / "docs"
    root.mkdir(parents=True)
    for d in start:
        (root / f"d{d:04d}.txt").write_text(texts[d])
    s = CountingSummarizer()
    p = pipeline(tmp / name, emb, s)
    p.build(root)
    p.apply_stage.defer_summaries = lambda: name == "coalesced"
    built_tokens, built_calls = s.input_tokens, s.calls
    per_change: list[int] = []
    ratios: list[float] = []
    pending: list[int] = []
    doc_tokens: list[int] = []
    floor_tokens = 0
    window_floor: dict[str, int] = {}  # summary -> input tokens: the floor of the open window
    t0 = time.perf_counter()
    for i, (kind, doc, donor) in enumerate(ops):
        path = root / f"d{doc:04d}.txt"
        probe = FloorProbe(p.require_state(), path, gone=kind == "remove")
        if kind == "remove":
            changed = len(tok.encode(path.read_text()))
            path.unlink()
            before = s.input_tokens
            p.update([path], remove=True)
        else:
            text = texts[doc] if kind == "add" else path.read_text() + "\n" + texts[donor][:600]
            path.write_text(text)
            changed = len(tok.encode(text))
            before = s.input_tokens
            p.update([path])
        pending.append(s.input_tokens - before)
        doc_tokens.append(changed)
        window_floor.update(probe.after(p.require_state()))
        if name != "coalesced" or (i + 1) % window == 0 or i + 1 == len(ops):
            floor_tokens += sum(window_floor.values())  # a summary in the floor is read once
            window_floor = {}
        if name == "coalesced" and ((i + 1) % window == 0 or i + 1 == len(ops)):
            before = s.input_tokens
            p.refresh()
            pending[-1] += s.input_tokens - before
            spent = sum(pending)
            per_change += [spent // len(pending)] * len(pending)
            ratios += [spent / max(1, sum(doc_tokens))] * len(pending)
            pending, doc_tokens = [], []
        elif name != "coalesced":
            per_change.append(pending[-1])
            ratios.append(pending[-1] / max(1, changed))
            pending, doc_tokens = [], []
    state = p.require_state()
    out = {
        "mode": name,
        "tokens": s.input_tokens - built_tokens,
        "summaries": s.calls - built_calls,
        "median_per_change": statistics.median(per_change),
        "median_ratio_to_doc": statistics.median(ratios),
        "floor_tokens": floor_tokens,
        "stale_left": len(state.stale),
        "seconds": time.perf_counter() - t0,
        "root": root,
        "p": p,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--changes", type=int, default=60, help="single-document changes (1 a minute)")
    ap.add_argument("--window", type=int, default=5, help="changes per refresh window")
    ap.add_argument("--paragraphs", type=int, default=6, help="SQuAD paragraphs per document")
    ap.add_argument("--questions", type=int, default=600, help="questions for recall (0: skip)")
    ap.add_argument("--min-change", type=float, default=SummarySettings().min_change)
    ap.add_argument("--soft-margin", type=float, default=SummarySettings().soft_margin)
    args = ap.parse_args()
    RULES.update(min_change=args.min_change, soft_margin=args.soft_margin)
    from retriever.embedding import SentenceTransformerEmbedder

    rng = random.Random(7)
    emb = CachedEmbedder(SentenceTransformerEmbedder())
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        texts, questions = documents(tmp, args.paragraphs)
        start, ops = script(len(texts), args.changes, rng)
        rng.shuffle(questions)
        questions = questions[: args.questions]
        print(
            f"SQuAD part A: {len(texts)} documents of {args.paragraphs} paragraphs, {len(start)} "
            f"built, {len(ops)} changes (add/edit/remove), a refresh every {args.window}; "
            f"min change {args.min_change}, soft margin {args.soft_margin}"
        )
        rows = [
            run_mode(m, tmp, emb, texts, start, ops, args.window) for m in ("at once", "coalesced")
        ]
        final = rows[0]["root"]
        s = CountingSummarizer()
        full = pipeline(tmp / "rebuild", emb, s)
        full.build(final)  # type: ignore[arg-type]
        rebuild_tokens = s.input_tokens
        qvecs = emb.embed_documents([q.text for q in questions]) if questions else None
        answers = [q.answers for q in questions]
        ref = recall(full, qvecs, answers) if questions else float("nan")
        print(
            f"  one full rebuild of the final folder: {rebuild_tokens:,} input tokens, "
            f"{s.calls} summaries; recall@2000 {ref:.1%}"
        )
        head = (
            "mode",
            "in tokens",
            "summaries",
            "/rebuild",
            "median/change",
            "x doc",
            "stale",
            "recall@2000",
            "floor/rebuild",
        )
        print("  " + " ".join(f"{h:>13}" for h in head))
        for r in rows:
            rec = recall(r["p"], qvecs, answers) if questions else float("nan")  # type: ignore[arg-type]
            print(
                f"  {r['mode']:>13} {r['tokens']:>13,} {r['summaries']:>13} "
                f"{r['tokens'] / max(1, rebuild_tokens):>13.2f} {r['median_per_change']:>13,.0f} "
                f"{r['median_ratio_to_doc']:>13.1f} {r['stale_left']:>13} {rec:>13.1%} "
                f"{r['floor_tokens'] / max(1, rebuild_tokens):>13.2f}"  # type: ignore[operator]
            )
            r["p"].context.store.close()  # type: ignore[attr-defined]
        full.context.store.close()
        print(
            f"  peak RSS {peak_rss_mb():.0f} MiB; embedding {emb.seconds:.0f} s (cached across modes)"
        )
        print(
            "  targets: coalesced tokens <= 0.5x one rebuild; median per change <= 10x the document;"
        )
        print(
            "  recall within 1 point of the rebuild's; no stale summary left after the last window"
        )
        print(
            "  floor/rebuild: the input tokens of the summaries whose clusters' hard memberships "
            "the changes touched, up the ancestors (bench/floor.py), each read once per window"
        )


if __name__ == "__main__":
    main()
