"""Who may read what, measured (issue 53): the reader filter's cost, a permission change's cost,
the build of a many-class folder, and leaks through the doors.

    python bench/access.py [--nodes 100000] [--classes 100] [--files 10000] [--queries 200]
                           [--articles 12] [--recall-questions 600]
                           [--skip filter,change,recall,leaks]

- **filter**: the synthetic tree of bench/query.py (tree-shaped 384-d vectors) with each leaf in
  one of ``--classes`` access classes (by folder) and each summary listing its children's union;
  the embedded store, HNSW built. p50/p95 of a collapsed query (planned search + fill, 2,000
  tokens) unfiltered, and for callers who may read half, a tenth and one class; recall of the
  hits the timed query asks the engine for (32), and @100, against the exact top of what each
  may read; the time to fill the access map the readers' queries use (retriever.access_map),
  and the copies of the points of readers whose queries scan (retriever.reader_copy), each
  asked for by one query first, as a daemon fills them.
  Target: filtered p50 <= 1.2x unfiltered.
- **change**: ``--files`` small files in ``--classes`` folders, built with the fake embedder
  (the cost measured is the permission work, never embedding); then one folder's mode changed
  and ``Pipeline.update_access`` timed (a full reading of every file's permissions + the points
  rewritten), embedding calls counted. Target: <= 2 s at 10,000 files, 0 embedding calls. Also
  the build of the folder as ``--classes`` classes against the same files as one class.
  Target: <= 1.3x.
- **recall**: SQuAD articles, half of them private to another account. Collapsed-tree (hybrid)
  answer recall at 2,000 tokens for the owner on this tree against the same files as one class
  (target: within 1 point; the clustering ignores classes, so the trees are equal), and for an
  anonymous caller on this tree against a tree built from the public articles alone, on the
  public articles' questions (target: within 1 point).
- **leaks**: a red-team share (owners, a group, an ACL, a folder without ``x`` for others, a file
  moved from public to private, a chmod while the daemon runs), a unique secret per restricted
  file, users made for the run; every door asked as every principal (the Unix socket as each
  user, HTTP with no token, named tokens, every /query mode, /ask, the facade's
  search/query/scroll/count/retrieve with hostile filters, MCP search/read_node, the dashboard's
  node APIs). Prints the number of secrets returned to a principal who may not read them:
  target 0. Needs root (users, chown).

Prints peak RSS; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from synthetic_tree import DIM, MODEL, make_cases, make_corpus, make_queries  # noqa: E402

from retriever.edge_store import EdgeNodeStore  # noqa: E402
from retriever.plan import first_hits  # noqa: E402
from retriever.search import candidate_limit  # noqa: E402

MAX_TOKENS = 2000


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(ts: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(ts) * 1000, q))


# -- filter ----------------------------------------------------------------------------------


def bench_filter(n: int, n_classes: int, k: int, folder: Path) -> None:
    rng = np.random.default_rng(0)
    c = make_corpus(n, rng)
    by_id = {nd.node_id: i for i, nd in enumerate(c.nodes)}
    classes: list[frozenset[str]] = []
    for nd in c.nodes:  # parents come after their children in the corpus
        if nd.layer == 0:
            top = nd.source.split("/")[1] if nd.source else "x"
            digest = int(hashlib.sha256(top.encode()).hexdigest(), 16)
            classes.append(frozenset({f"c{digest % n_classes}"}))
        else:
            classes.append(frozenset().union(*(classes[by_id[ch]] for ch in nd.children)))
    c.nodes = [
        nd.model_copy(update={"access": tuple(sorted(a))})
        for nd, a in zip(c.nodes, classes, strict=True)
    ]
    store = EdgeNodeStore(folder / "filter")
    store.ensure_collection(DIM, MODEL)
    store.upsert(c.nodes, c.vectors)
    store.optimize()
    case = make_cases(c, k, rng)[0]  # the whole tree
    all_classes = sorted({a for s in classes for a in s})
    readers = {
        "unfiltered (owner)": None,
        f"reads {len(all_classes) // 2} of {len(all_classes)}": tuple(
            rng.choice(all_classes, len(all_classes) // 2, replace=False)
        ),
        f"reads {max(1, len(all_classes) // 10)} of {len(all_classes)}": tuple(
            rng.choice(all_classes, max(1, len(all_classes) // 10), replace=False)
        ),
        "reads 1 class": (all_classes[0],),
    }
    limit = candidate_limit(MAX_TOKENS)
    first = first_hits(limit, MAX_TOKENS)  # the hits the timed query asks the engine for
    base_p50 = None
    store.access_map.wanted = True  # as a reader's first walk asks; then what the daemon does:
    t0, pages = time.perf_counter(), 1  # the access map filled a page (a store call) at a time
    while not store.fill_access_page():
        pages += 1
    fill_s = time.perf_counter() - t0
    print(f"access map: {len(c.nodes):,} points read in {fill_s:.2f} s ({pages} store calls)")
    filters = {name: replace(case.flt, readable=r) for name, r in readers.items()}
    for flt in filters.values():  # each reader asks once: a reader whose plan scans wants a
        store.search_budget(case.queries[0], flt, limit, MAX_TOKENS)  # copy of its points,
    t0, pages = time.perf_counter(), 1  # which the daemon fills a page at a time
    while not store.fill_access_page():
        pages += 1
    copied, nbytes = store.access_map.copies.held
    print(
        f"readers' copies (retriever.reader_copy): {copied:,} points, "
        f"{nbytes / 2**20:.1f} MiB, "
        f"filled in {time.perf_counter() - t0:.2f} s ({pages} store calls)"
    )
    print(f"filter: {len(c.nodes):,} nodes, {len(all_classes)} classes, {k} queries, top {limit}")
    print("  (each query timed for every caller in turn, twice: the machine's drift cancels out)")
    ts: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(2):
        for q in case.queries:
            for name, flt in filters.items():
                t0 = time.perf_counter()
                store.search_budget(q, flt, limit, MAX_TOKENS)
                ts[name].append(time.perf_counter() - t0)
    for name, readable in readers.items():
        flt = filters[name]
        keep = case.mask.copy()
        if readable is not None:
            ok = set(readable)
            keep &= np.array([bool(a) and a <= ok for a in classes])
        sub = np.nonzero(keep)[0]
        recalls: dict[int, list[float]] = {first: [], 100: []}
        for q in case.queries:
            order = sub[np.argsort(-(c.vectors[sub] @ q))]
            for top, found in recalls.items():
                got = {h.node.node_id for h in store.search(q, flt, top)}
                want = {c.nodes[i].node_id for i in order[:top]}
                found.append(len(got & want) / max(1, len(want)))
        p50 = pct(ts[name], 50)
        base_p50 = base_p50 or p50
        print(
            f"  {name:<22} matching {len(sub):>7,}: p50 {p50:6.2f} ms  p95 {pct(ts[name], 95):6.2f}"
            f" ms  ({p50 / base_p50:4.2f}x unfiltered; target <= 1.2x)  recall@{first} "
            f"{np.mean(recalls[first]):.3f}  @100 {np.mean(recalls[100]):.3f}"
        )
    _own_questions(store, c, case, classes, readers, filters, k, limit, rng)
    store.close()


def _own_questions(  # type: ignore[no-untyped-def]
    store, c, case, classes, readers, filters, k: int, limit: int, rng: np.random.Generator
) -> None:
    """The half reader again, on questions near leaves it may read (what a member of a team
    mostly asks about), against the owner on the same questions: the walk's cost where a
    question lands among readable points. The target is judged on the questions above (any
    leaf), where half land among points the reader may not read."""
    name = next(n for n, r in readers.items() if r is not None)
    ok = set(readers[name])
    mine = np.nonzero(
        case.mask & (c.layers == 0) & np.array([bool(a) and a <= ok for a in classes])
    )[0]
    queries = make_queries(c, mine, k, rng)
    ts: dict[str, list[float]] = {"owner": [], name: []}
    for _ in range(2):
        for q in queries:
            for who, flt in (("owner", filters["unfiltered (owner)"]), (name, filters[name])):
                t0 = time.perf_counter()
                store.search_budget(q, flt, limit, MAX_TOKENS)
                ts[who].append(time.perf_counter() - t0)
    owner, reader = pct(ts["owner"], 50), pct(ts[name], 50)
    print(
        f"  {name}, questions near its own leaves: p50 {reader:6.2f} ms, the owner "
        f"{owner:6.2f} ms on the same questions ({reader / owner:4.2f}x)"
    )


# -- change ----------------------------------------------------------------------------------


def _share(root: Path, n_files: int, n_classes: int, spread: bool) -> None:
    import random

    from testkit.corpus import doc_text

    rng = random.Random(0)
    for i in range(n_files):
        d = root / f"team{i % n_classes:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(doc_text(rng, 2))
    if spread:  # one owner per folder, private to it: one class per folder
        for j in range(n_classes):
            d = root / f"team{j:03d}"
            os.chown(d, 60000 + j, 60000 + j)
            os.chmod(d, 0o750)


def _pipeline(folder: Path):  # type: ignore[no-untyped-def]
    from testkit.corpus import make_pipeline

    return make_pipeline(folder)


def bench_change(n_files: int, n_classes: int, folder: Path) -> None:
    print(f"change: {n_files:,} files in {n_classes} folders (fake embedder)")
    walls = {}
    pipes = {}
    for spread in (False, True):
        root = folder / f"share-{spread}"
        _share(root, n_files, n_classes, spread)
        p = _pipeline(folder / f"state-{spread}")
        t0 = time.perf_counter()
        p.build(root)
        walls[spread] = time.perf_counter() - t0
        pipes[spread] = (p, root)
    print(
        f"  build, 1 class {walls[False]:6.1f} s; {n_classes} classes {walls[True]:6.1f} s "
        f"({walls[True] / walls[False]:4.2f}x; target <= 1.3x)"
    )
    p, root = pipes[True]
    state = p.require_state()
    before = len(p.context.embedder.texts)
    os.chmod(root / "team000", 0o755)
    t0 = time.perf_counter()
    report = p.update_access(state)
    dt = time.perf_counter() - t0
    print(
        f"  chmod of one folder ({report.files_reclassed} files): applied in {dt:5.2f} s "
        f"(target <= 2 s), {len(report.stats.upserted)} points rewritten, "
        f"{len(p.context.embedder.texts) - before} texts embedded (target 0)"
    )
    t0 = time.perf_counter()
    report = p.update_access(state)
    print(f"  a reading with nothing changed: {time.perf_counter() - t0:5.2f} s")
    for p, _ in pipes.values():
        p.context.store.close()


# -- recall ---------------------------------------------------------------------------------


def bench_recall(n_articles: int, n_questions: int, folder: Path) -> None:
    from datasets import sample, squad_folder, squad_titles

    from ingestor.answer.service import QueryService
    from ingestor.cli.factories import make_embedder, make_pipeline
    from ingestor.config import Settings
    from ingestor.read.access_classes import ANONYMOUS, UNRESTRICTED
    from retriever import SearchFilter, collapsed_tree

    titles = squad_titles()[:n_articles]
    mixed, questions = squad_folder(folder / "mixed", titles)
    private = {p.name for p in mixed[1::2]}
    public_dir = folder / "public"
    public_dir.mkdir()
    for p in mixed:
        if p.name in private:
            os.chown(p, 60001, 60001)
            os.chmod(p, 0o600)
        else:
            shutil.copy(p, public_dir / p.name)
    one_class = folder / "one"
    shutil.copytree(folder / "mixed", one_class)
    for p in one_class.iterdir():
        os.chmod(p, 0o644)
    qs = sample(questions, n_questions)
    public_qs = [q for q in qs if q.gold_sources[0] not in private]

    def build(root: Path):  # type: ignore[no-untyped-def]
        s = Settings(_env_file=None, state_dir=folder / f"state-{root.name}")  # type: ignore[call-arg]
        embedder = make_embedder(s)
        store = EdgeNodeStore(s.state_dir / "qdrant")
        p = make_pipeline(s, store, embedder)
        p.build(root)
        return p, QueryService(store, embedder, s.tree, classes=p.context.access.registry)

    def recall(service: QueryService, who, questions) -> float:  # type: ignore[no-untyped-def]
        flt = service.reader_filter(SearchFilter(tree=service.tree), who)
        hit = 0
        for q in questions:
            v = service.embedder.embed_query(q.text)
            ctx = collapsed_tree(service.store, v, flt, max_tokens=MAX_TOKENS, text=q.text)
            text = " ".join(h.node.text for h in ctx).lower()
            hit += any(a.lower() in text for a in q.answers)
        return hit / max(1, len(questions))

    trees = {name: build(folder / name) for name in ("mixed", "one", "public")}
    same = set(trees["mixed"][0].require_state().nodes.keys()) == set(
        trees["one"][0].require_state().nodes.keys()
    )
    owner_mixed = recall(trees["mixed"][1], UNRESTRICTED, qs)
    owner_one = recall(trees["one"][1], UNRESTRICTED, qs)
    anon_mixed = recall(trees["mixed"][1], ANONYMOUS, public_qs)
    anon_public = recall(trees["public"][1], UNRESTRICTED, public_qs)
    print(
        f"recall: {n_articles} SQuAD articles ({len(private)} private), {len(qs)} questions, "
        f"collapsed +bm25 at {MAX_TOKENS} tokens"
    )
    print(
        f"  owner: {owner_mixed:.1%} on the 2-class tree, {owner_one:.1%} on one class "
        f"(same nodes: {same}; target within 1 point)"
    )
    print(
        f"  anonymous, {len(public_qs)} questions on public articles: {anon_mixed:.1%} on the "
        f"2-class tree, {anon_public:.1%} on a tree of the public articles alone "
        f"({(anon_mixed - anon_public) * 100:+.1f} points; target within 1 point)"
    )
    for _, service in trees.values():
        service.store.close()


# -- leaks -----------------------------------------------------------------------------------


def bench_leaks() -> None:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        print("leaks: skipped (needs root and useradd)")
        return
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:randomly",
           "tests/unit/service/test_access_doors.py", "tests/unit/service/test_access_redteam.py"]  # fmt: skip
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    tail = [
        ln for ln in out.stdout.splitlines() if "passed" in ln or "failed" in ln or "LEAK" in ln
    ]
    print(f"leaks: every door as every principal ({time.perf_counter() - t0:.0f} s): {tail}")
    leaks = [ln for ln in out.stdout.splitlines() if "LEAK" in ln]
    print(f"  secrets returned to a principal who may not read them: {len(leaks)} (target 0)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--articles", type=int, default=12, help="SQuAD articles of the recall part")
    ap.add_argument("--recall-questions", type=int, default=600)
    ap.add_argument("--skip", default="")
    a = ap.parse_args(argv)
    skip = set(a.skip.split(","))
    with tempfile.TemporaryDirectory(prefix="adrap-access-") as tmp:
        folder = Path(tmp)
        if "filter" not in skip:
            bench_filter(a.nodes, a.classes, a.queries, folder)
        if "change" not in skip:
            bench_change(a.files, a.classes, folder)
        if "recall" not in skip:
            bench_recall(a.articles, a.recall_questions, folder)
    if "leaks" not in skip:
        bench_leaks()
    print(f"peak RSS {peak_mb():,.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
