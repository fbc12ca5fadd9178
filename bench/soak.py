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

    python bench/soak.py [--ops 5000] [--seed 0] [--real-embeddings] [--summarizer extractive|echo]
    python bench/soak.py --daemon [--ops 150] [--max-batch 10]

--daemon drives a running `adrap watch` (default settings: the packaged embedding model, extractive
summaries; drift rebuilds off) by editing the folder on disk; after each batch it waits until the
committed state lists exactly the files on disk, then checks the tree invariants on it; store ids
== state ids is checked once the daemon has exited (it owns the embedded store while it runs).

The short version runs in the test suite (tests/unit/tree/test_soak.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sklearn.metrics import adjusted_rand_score

from bench.datasets import SQUAD
from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.invariants import violations
from models_store import ModelStore, ModelStoreError
from retriever import Embedder, SearchFilter, collapsed_tree
from retriever.edge_store import EdgeNodeStore

TREE = "soak"
OPS = ("add", "edit", "remove", "rename", "add_dir", "remove_dir")
WEIGHTS = (30, 25, 14, 11, 10, 10)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORDS = [
    "river",
    "market",
    "engine",
    "harvest",
    "archive",
    "signal",
    "theorem",
    "violin",
    "glacier",
    "court",
    "orbit",
    "cider",
    "protein",
    "ledger",
    "canyon",
    "satellite",
    "library",
    "mineral",
    "festival",
    "voltage",
    "harbour",
    "parliament",
]


@dataclass(frozen=True)
class Paragraph:
    title: str
    text: str
    questions: tuple[tuple[str, tuple[str, ...]], ...]


def squad_paragraphs() -> list[Paragraph]:
    """Every paragraph of the SQuAD part-A articles with its questions and answers."""
    out = []
    for article in json.loads(SQUAD.read_text())["data"]:
        for p in article["paragraphs"]:
            qas = tuple(
                (qa["question"], tuple(dict.fromkeys(a["text"] for a in qa["answers"])))
                for qa in p["qas"]
            )
            out.append(Paragraph(article["title"], p["context"].strip(), qas))
    return out


class Corpus:
    """Makes and edits documents: SQuAD paragraphs (consecutive, one article) or generated text."""

    def __init__(self, rng: random.Random, generated_share: float = 0.3) -> None:
        self.rng = rng
        # Without the SQuAD file (a CI checkout without ../shared/data) every document is generated.
        self.paragraphs = squad_paragraphs() if SQUAD.exists() else []
        self.generated_share = generated_share if self.paragraphs else 1.0
        self.sentences = [s for p in self.paragraphs for s in _SENTENCE.split(p.text) if s]
        self.sentences = self.sentences or _SENTENCE.split(self.generated(50))

    def document(self) -> str:
        if self.rng.random() < self.generated_share:
            return self.generated(self.rng.randint(3, 12))
        start = self.rng.randrange(len(self.paragraphs))
        title = self.paragraphs[start].title
        run = [
            p.text
            for p in self.paragraphs[start : start + self.rng.randint(1, 3)]
            if p.title == title
        ]
        return "\n\n".join(run) + "\n"

    def generated(self, n: int) -> str:
        topic = self.rng.sample(_WORDS, 4)
        out = []
        for i in range(n):
            words = [*topic, *self.rng.sample(_WORDS, 3)]
            self.rng.shuffle(words)
            out.append(f"{' '.join(words).capitalize()} note {self.rng.randint(0, 10**6)} {i}.")
        return " ".join(out) + "\n"

    def edit(self, text: str) -> str:
        """Replace one to three sentences (at random places) by sentences from elsewhere."""
        sentences = _SENTENCE.split(text.strip())
        for _ in range(self.rng.randint(1, 3)):
            sentences[self.rng.randrange(len(sentences))] = self.rng.choice(self.sentences)
        return " ".join(sentences) + "\n"


@dataclass
class SoakStats:
    ops: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    checks: int = 0
    update_seconds: float = 0.0
    update_cpu: float = 0.0
    check_seconds: float = 0.0
    summaries: int = 0
    splits: int = 0
    layers_added: int = 0
    layers_dropped: int = 0
    max_depth: int = 0
    rss_after_build_mb: float = 0.0
    rss_end_mb: float = 0.0


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_mb() -> float:
    """Current resident memory of this process (MiB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_pipeline(
    state_dir: Path,
    embedder: Embedder,
    summarizer: Any,
    *,
    chunk_tokens: int = 250,
    n_epochs: int = 200,
) -> Pipeline:
    builder = TreeBuilder(
        embedder,
        summarizer,
        lambda: TreeClusterer(random_state=0, n_epochs=n_epochs),
        TreeParams(),
    )
    return Pipeline(
        tree=TREE,
        embedder=embedder,
        builder=builder,
        store=EdgeNodeStore(state_dir / "qdrant"),
        models=ModelStore(state_dir / "models"),
        chunk_tokens=chunk_tokens,
        chunk_overlap=chunk_tokens // 5,
        drift_threshold=1e12,  # no drift rebuilds: adRAP alone carries the tree
    )


def check(p: Pipeline, root: Path) -> int:
    """Assert every invariant of the tree, the store and the folder; return how many held."""
    state = p.require_state()
    params = p.builder.params
    bad = violations(state, min_top_nodes=params.min_top_nodes, max_layers=params.max_layers)
    assert not bad, f"{len(bad)} invariant(s) broken, first: {bad[:5]}"
    stored = set(p.store.iter_ids(TREE))
    assert stored == set(state.nodes), (
        f"store and state disagree: {len(stored - set(state.nodes))} extra points, "
        f"{len(set(state.nodes) - stored)} missing"
    )
    for payload in p.store.retrieve(list(state.nodes)):
        node = state.nodes[payload.node_id]
        assert list(payload.parents) == node.parents, f"{node.node_id}: stored parents differ"
        assert list(payload.children) == node.children, f"{node.node_id}: stored children differ"
    on_disk = {f.relative_to(root).as_posix() for f in root.rglob("*.txt") if f.stat().st_size}
    assert set(state.sources) == on_disk, "sources differ from the files on disk"
    return 4


class Soak:
    """Random operations on ``root``, applied through ``pipeline`` one batch at a time."""

    def __init__(
        self, pipeline: Pipeline | None, root: Path, corpus: Corpus, rng: random.Random
    ) -> None:
        self.p = pipeline
        self.root = root
        self.corpus = corpus
        self.rng = rng
        self.serial = 0
        self.stats = SoakStats()

    def seed_folder(self, n_docs: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for _ in range(n_docs // 2):
            self._write(self.root / self._name())
        for _ in range(max(1, n_docs // 10)):
            self._add_dir()

    def _name(self) -> str:
        self.serial += 1
        return f"doc{self.serial:06d}.txt"

    def _write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.corpus.document())

    def _files(self) -> list[Path]:
        return sorted(self.root.rglob("*.txt"))

    def _dirs(self) -> list[Path]:
        return sorted(d for d in self.root.iterdir() if d.is_dir())

    def _add_dir(self) -> Path:
        d = self.root / f"dir{self.serial:06d}"
        for _ in range(self.rng.randint(2, 6)):
            self._write(d / self._name())
        return d

    def operation(self, op: str) -> list[Path]:
        """Do one operation on disk; return the paths it touched (for Pipeline.update)."""
        files, dirs = self._files(), self._dirs()
        if op == "add" or not files:
            where = self.rng.choice([self.root, *dirs])
            path = where / self._name()
            self._write(path)
            return [path]
        if op == "edit":
            path = self.rng.choice(files)
            path.write_text(self.corpus.edit(path.read_text()))
            return [path]
        if op == "remove":
            path = self.rng.choice(files)
            path.unlink()
            return [path]
        if op == "rename":
            path = self.rng.choice(files)
            target = self.rng.choice([self.root, *dirs]) / self._name()
            path.rename(target)
            return [path, target]
        if op == "add_dir" or not dirs:
            return [self._add_dir()]
        d = self.rng.choice(dirs)
        shutil.rmtree(d)
        return [d]

    def operations(self, n_ops: int) -> list[Path]:
        """Do ``n_ops`` random operations on disk; return the paths they touched."""
        touched: list[Path] = []
        for op in self.rng.choices(OPS, WEIGHTS, k=n_ops):
            touched += self.operation(op)
            self.stats.ops[op] += 1
        return touched

    def batch(self, n_ops: int) -> None:
        assert self.p is not None
        touched = self.operations(n_ops)
        t0, c0 = time.perf_counter(), cpu_seconds()
        report = self.p.update(list(dict.fromkeys(touched)))
        self.stats.update_seconds += time.perf_counter() - t0
        self.stats.update_cpu += cpu_seconds() - c0
        assert not report.rebuilt, "drift rebuilds are off: adRAP must carry the tree"
        if report.stats is not None:
            self.stats.summaries += report.stats.summaries_regenerated
            self.stats.splits += report.stats.clusters_split
            self.stats.layers_added += report.stats.layers_added
            self.stats.layers_dropped += report.stats.layers_dropped
        self.stats.batches += 1

    def run(
        self,
        n_ops: int,
        max_batch: int = 50,
        on_batch: Callable[[Soak], None] | None = None,
    ) -> SoakStats:
        done = 0
        while done < n_ops:
            n = min(self.rng.randint(1, max_batch), n_ops - done)
            self.batch(n)
            done += n
            assert self.p is not None
            t0 = time.perf_counter()
            self.stats.checks += check(self.p, self.root)
            self.stats.check_seconds += time.perf_counter() - t0
            self.stats.max_depth = max(self.stats.max_depth, len(self.p.require_state().layers) + 1)
            if on_batch is not None:
                on_batch(self)
        return self.stats


def layer1_labels(p: Pipeline) -> dict[str, str]:
    """Each leaf's layer-1 cluster, named by its first parent (soft memberships: the first)."""
    state = p.require_state()
    return {i: min(n.parents) if n.parents else i for i, n in state.nodes.items() if n.layer == 0}


def cluster_sizes(p: Pipeline) -> list[int]:
    state = p.require_state()
    return sorted((len(n.children) for n in state.nodes.values() if n.layer == 1), reverse=True)


def answer_recall(p: Pipeline, questions: list[tuple[str, tuple[str, ...]]]) -> float:
    if not questions:
        return float("nan")
    qvecs = p.embedder.embed_documents([q for q, _ in questions])
    hit = 0
    for v, (_q, answers) in zip(qvecs, questions, strict=True):
        text = " ".join(h.node.text for h in collapsed_tree(p.store, v, SearchFilter(tree=TREE)))
        hit += any(a.lower() in text.lower() for a in answers)
    return hit / len(questions)


def present_questions(
    corpus: Corpus, root: Path, limit: int, rng: random.Random
) -> list[tuple[str, tuple[str, ...]]]:
    """Questions whose SQuAD paragraph is in the folder unedited (a sample of ``limit``)."""
    text = "\n".join(f.read_text() for f in root.rglob("*.txt"))
    qs = [q for par in corpus.paragraphs if par.text in text for q in par.questions]
    return rng.sample(qs, min(limit, len(qs)))


@dataclass
class Comparison:
    ari: float
    largest: int
    largest_rebuild: int
    sizes: list[int]
    sizes_rebuild: list[int]
    recall: float
    recall_rebuild: float
    n_questions: int


def compare_with_rebuild(
    p: Pipeline,
    root: Path,
    state_dir: Path,
    corpus: Corpus,
    summarizer: Any,
    questions: int,
    rng: random.Random,
) -> Comparison:
    """Build the final folder from scratch and compare the adRAP tree with it."""
    epochs = p.builder.make_clusterer().n_epochs  # type: ignore[attr-defined]
    full = make_pipeline(
        state_dir, p.embedder, summarizer, chunk_tokens=p.chunk_tokens, n_epochs=epochs
    )
    try:
        full.build(root)
        ref, got = layer1_labels(full), layer1_labels(p)
        common = sorted(set(ref) & set(got))
        assert len(common) == len(ref) == len(got), "the rebuild has other leaves"
        ari = adjusted_rand_score([ref[i] for i in common], [got[i] for i in common])
        qs = present_questions(corpus, root, questions, rng)
        sizes, sizes_full = cluster_sizes(p), cluster_sizes(full)
        return Comparison(
            ari,
            max(sizes, default=0),
            max(sizes_full, default=0),
            sizes,
            sizes_full,
            answer_recall(p, qs),
            answer_recall(full, qs),
            len(qs),
        )
    finally:
        full.store.close()


def _embedder(real: bool) -> Embedder:
    if real:
        from retriever.embedding import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder()
    from tests.fakes import HashEmbedder

    return HashEmbedder(dim=384)


def _summarizer(name: str) -> Any:
    if name == "echo":
        from tests.fakes import EchoSummarizer

        return EchoSummarizer()
    from ingestor.summarize.extractive import ExtractiveSummarizer

    return ExtractiveSummarizer()


def _quantiles(sizes: list[int]) -> str:
    if not sizes:
        return "-"
    s = sorted(sizes)
    q = [s[min(len(s) - 1, int(f * len(s)))] for f in (0.5, 0.9, 0.99)]
    return f"n={len(s)} median {q[0]} p90 {q[1]} p99 {q[2]} max {s[-1]}"


def daemon_soak(n_ops: int, max_batch: int, seed: int, n_docs: int) -> int:
    """Drive a running ``adrap watch`` through random batches of file operations."""
    import subprocess
    import urllib.request

    from ingestor.tree.persist import state_name

    def http_json(url: str) -> dict[str, Any]:
        with urllib.request.urlopen(url, timeout=30) as resp:
            out: dict[str, Any] = json.loads(resp.read())
            return out

    def committed() -> Any:
        return ModelStore(state_dir / "models").load(state_name("default"))

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        root, state_dir = tmp / "folder", tmp / "state"
        ops = Soak(None, root, Corpus(rng), rng)
        ops.seed_folder(n_docs)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")} | {
            "ADRAP_STATE_DIR": str(state_dir),
            "ADRAP_ADRAP__DRIFT_THRESHOLD": "1e12",
            "ADRAP_WATCH__DEBOUNCE_SECONDS": "0.5",
            "HF_HUB_OFFLINE": "1",
        }
        log = (tmp / "watch.log").open("w")
        cmd = [sys.executable, "-m", "ingestor", "watch", str(root), "--http-port", "0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
        t_start = time.perf_counter()
        try:
            base = ""
            while not base:
                assert proc.poll() is None, (tmp / "watch.log").read_text()
                lock = state_dir / "adrap.lock"
                info = json.loads(lock.read_text() or "{}") if lock.exists() else {}
                if info.get("pid") == proc.pid and "http" in info:
                    base = f"http://{info['http']}"
                time.sleep(0.2)

            def converged() -> Any:
                assert proc.poll() is None, (tmp / "watch.log").read_text()[-3000:]
                try:
                    if http_json(base + "/status")["pending_events"]:
                        return None
                    state = committed()
                except (OSError, ValueError, KeyError, ModelStoreError):  # not built yet
                    return None
                files = {f.relative_to(root).as_posix() for f in root.rglob("*.txt")}
                return state if set(state.sources) == files else None

            def wait() -> Any:
                deadline = time.monotonic() + 600
                while (state := converged()) is None:
                    assert time.monotonic() < deadline, "the daemon did not converge in 600 s"
                    time.sleep(0.3)
                return state

            state = wait()
            print(
                f"daemon built {len(state.sources)} documents in {time.perf_counter() - t_start:.0f}s"
            )
            done = checks = batches = 0
            t0 = time.perf_counter()
            while done < n_ops:
                n = min(rng.randint(1, max_batch), n_ops - done)
                ops.operations(n)
                done += n
                state = wait()
                bad = violations(state)
                assert not bad, f"after {done} operations: {bad[:5]}"
                checks += 1
                batches += 1
            wall = time.perf_counter() - t0
            status = http_json(base + "/status")
            proc.terminate()
            assert proc.wait(120) == 0, "adrap watch did not exit 0 on SIGTERM"
            state = committed()
            with EdgeNodeStore(state_dir / "qdrant") as store:
                assert set(store.iter_ids("default")) == set(state.nodes), "store != state"
            print(
                f"daemon: {done} operations in {batches} batches ({dict(ops.stats.ops)}), "
                f"{done / wall:.2f} ops/s wall incl. embedding and debounce; {checks} invariant "
                f"checks passed on the committed state; store ids == state ids after SIGTERM; "
                f"updates applied {status['updates_applied']}, layers {state.layer_counts()}"
            )
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    return 0


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
    ap.add_argument("--daemon", action="store_true", help="drive `adrap watch` (fewer ops)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.daemon:
        return daemon_soak(args.ops, args.max_batch, args.seed, args.docs)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        root = tmp / "folder"
        summarizer = _summarizer(args.summarizer)
        p = make_pipeline(tmp / "state", _embedder(args.real_embeddings), summarizer)
        corpus = Corpus(rng)
        soak = Soak(p, root, corpus, rng)
        soak.seed_folder(args.docs)
        t0 = time.perf_counter()
        p.build(root)
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
                st = s.p.require_state()
                print(
                    f"  {done:>6} ops {s.stats.batches:>4} batches "
                    f"{done / max(s.stats.update_seconds, 1e-9):6.1f} ops/s "
                    f"{done / max(s.stats.update_cpu, 1e-9):6.1f} ops/cpu-s "
                    f"layers {st.layer_counts()} rss {rss_mb():.0f} MiB",
                    flush=True,
                )

        t0 = time.perf_counter()
        stats = soak.run(args.ops, args.max_batch, progress)
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
            f"  summaries regenerated {stats.summaries}, clusters split {stats.splits}, "
            f"layers added {stats.layers_added} / dropped {stats.layers_dropped}, "
            f"deepest {stats.max_depth}"
        )
        print(
            f"end: {len(state.sources)} documents, {len(state.ids_in_layer(0))} leaves, "
            f"layers {state.layer_counts()}"
        )
        cmp = compare_with_rebuild(
            p, root, tmp / "rebuild", corpus, _summarizer(args.summarizer), args.questions, rng
        )
        print("against a full rebuild of the final folder:")
        print(f"  ARI of layer-1 memberships {cmp.ari:.3f}")
        print(f"  layer-1 cluster sizes adRAP   {_quantiles(cmp.sizes)}")
        print(f"  layer-1 cluster sizes rebuild {_quantiles(cmp.sizes_rebuild)}")
        ratio = cmp.largest / max(1, cmp.largest_rebuild)
        print(
            f"  largest cluster {cmp.largest} vs {cmp.largest_rebuild}: {ratio:.2f}x (target <= 2x)"
        )
        print(
            f"  collapsed-tree answer recall@2000 on {cmp.n_questions} questions: adRAP "
            f"{cmp.recall:.1%} vs rebuild {cmp.recall_rebuild:.1%} "
            f"({(cmp.recall - cmp.recall_rebuild) * 100:+.1f} points; target within 1)"
        )
        print(
            f"RSS after build {stats.rss_after_build_mb:.0f} MiB, at end {stats.rss_end_mb:.0f} "
            f"MiB; peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )
        p.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
