"""Calibrate the score below which `adrap query` says that nothing in the tree seems to answer.

Data: the SQuAD part-A articles (``bench.datasets.SQUAD``). The 24 articles are split in two
corpora (alternate articles); each paragraph is a leaf. A question asked of its own corpus is
*answerable*; the same question asked of the other corpus is *unanswerable* (its article is not
there). The score of a question is its best cosine similarity over the corpus, as the best hit
of a collapsed query (the packaged all-MiniLM-L6-v2, as a tree built with the defaults).

Prints the score distributions, a table of thresholds with precision and recall of "nothing
matches" (unanswerable) and the share of answerable questions it would flag, and the threshold
chosen: the highest that flags at most 5 % of the answerable questions (a flag still shows the
hits, but a warning on a good answer costs trust). Then the words rule (a passage holding every
word of the question answers it), on the questions and on keyword queries (two or three of the
longest words of one sentence of a paragraph: what a user types for a passage they remember):
the shares flagged with the threshold alone and with the rule. ~2 min of CPU (2 cores).

    python bench/no_match.py [--per-article 10] [--squad PATH/squad/...json]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datasets import SQUAD

from retriever import SentenceTransformerEmbedder
from retriever.sparse import bm25_documents, bm25_query

#: The share of answerable questions the chosen threshold may flag.
MAX_FLAGGED_ANSWERABLE = 0.05


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-article", type=int, default=10, help="questions sampled per article")
    ap.add_argument("--squad", type=Path, default=SQUAD, help="the SQuAD part-A JSON file")
    args = ap.parse_args()
    t0 = time.perf_counter()
    articles = json.loads(args.squad.read_text())["data"]
    rng = random.Random(0)
    corpora: list[list[str]] = [[], []]
    questions: list[tuple[int, str]] = []  # (corpus of its article, question)
    for i, article in enumerate(articles):
        side = i % 2
        corpora[side].extend(p["context"] for p in article["paragraphs"])
        qas = [qa["question"] for p in article["paragraphs"] for qa in p["qas"]]
        questions.extend((side, q) for q in rng.sample(qas, min(args.per_article, len(qas))))
    embedder = SentenceTransformerEmbedder()
    leaves = [embedder.embed_documents(c) for c in corpora]
    asked = embedder.embed_documents([q for _, q in questions])
    answerable, unanswerable = [], []
    for (side, _), vector in zip(questions, asked, strict=True):
        answerable.append(float((leaves[side] @ vector).max()))
        unanswerable.append(float((leaves[1 - side] @ vector).max()))
    ok, no = np.array(answerable), np.array(unanswerable)
    print(
        f"{len(questions)} questions, corpora of {len(corpora[0])} and {len(corpora[1])} "
        f"paragraphs; {time.perf_counter() - t0:.0f} s"
    )
    for name, scores in (("answerable", ok), ("unanswerable", no)):
        p = np.percentile(scores, [5, 25, 50, 75, 95])
        print(f"{name:<13} best score p5/p25/p50/p75/p95: " + " / ".join(f"{x:.3f}" for x in p))
    print(f"{'threshold':>9} {'precision':>9} {'recall':>7} {'answerable flagged':>19}")
    chosen = 0.0
    for t in np.arange(0.20, 0.56, 0.025):
        precision, recall, flagged = _rates(ok, no, float(t))
        print(f"{t:>9.3f} {precision:>9.3f} {recall:>7.3f} {flagged:>19.3f}")
    for t in np.arange(0.0, 1.0, 0.005):
        if _rates(ok, no, float(t))[2] <= MAX_FLAGGED_ANSWERABLE:
            chosen = round(float(t), 3)
    precision, recall, flagged = _rates(ok, no, chosen)
    print(
        f"threshold {chosen:.3f}: precision {precision:.3f}, recall {recall:.3f} of 'nothing "
        f"matches' on unanswerable questions; {flagged:.3f} of answerable ones flagged"
    )
    # the words rule: a passage holding every word of the question answers it (a hybrid query
    # ranks such a passage among its first hits; here any paragraph of the corpus counts)
    words = [[set(d.indices) for d in bm25_documents(c)] for c in corpora]
    for label, qs in (("questions", [q for _, q in questions]), ("keywords", _keywords(articles))):
        sides = [s for s, _ in questions] if label == "questions" else [s for s, _ in qs]
        texts = qs if label == "questions" else [q for _, q in qs]
        vecs = asked if label == "questions" else embedder.embed_documents(texts)
        got = {"answerable": [0, 0, 0], "unanswerable": [0, 0, 0]}  # asked, low, low and no words
        for side, text, vector in zip(sides, texts, vecs, strict=True):
            terms = set(bm25_query(text).indices)
            for name, corpus in (("answerable", side), ("unanswerable", 1 - side)):
                low = float((leaves[corpus] @ vector).max()) < chosen
                held = bool(terms) and any(terms <= d for d in words[corpus])
                got[name] = [
                    got[name][0] + 1,
                    got[name][1] + low,
                    got[name][2] + (low and not held),
                ]
        (n_ok, low_ok, flag_ok), (n_no, low_no, flag_no) = got["answerable"], got["unanswerable"]
        print(
            f"{label} ({n_ok}): flagged at {chosen:.3f} alone: answerable {low_ok / n_ok:.3f}, "
            f"unanswerable {low_no / n_no:.3f}; with the words rule: answerable "
            f"{flag_ok / n_ok:.3f}, unanswerable {flag_no / n_no:.3f}"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


def _keywords(articles: list[dict]) -> list[tuple[int, str]]:
    """Keyword queries a user types for a passage they remember: two or three of the rarest
    words (longest, as a proxy) of one sentence of a paragraph, lower case, per article ten."""
    rng = random.Random(1)
    out = []
    for i, article in enumerate(articles):
        for p in rng.sample(article["paragraphs"], min(10, len(article["paragraphs"]))):
            sentence = rng.choice(
                [s for s in p["context"].split(". ") if len(s.split()) > 6] or [p["context"]]
            )
            words = sorted({w.strip(",.;:()\"'").lower() for w in sentence.split()}, key=len)
            out.append(
                (i % 2, " ".join(rng.sample(words[-6:], min(len(words), rng.choice((2, 3))))))
            )
    return out


def _rates(ok: np.ndarray, no: np.ndarray, t: float) -> tuple[float, float, float]:
    """Precision and recall of "nothing matches" (score < t) and the answerable share flagged."""
    tp, fp = int((no < t).sum()), int((ok < t).sum())
    precision = tp / (tp + fp) if tp + fp else 1.0
    return precision, tp / len(no), fp / len(ok)


if __name__ == "__main__":
    main()
