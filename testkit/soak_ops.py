"""The soak's moving parts: documents (SQuAD and generated), random folder operations, the
pipeline under test and the after-every-batch check. Driven by bench/soak.py, bench/crash.py
and tests/unit/tree/test_soak.py.
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ingestor.cluster.layer_state import REFIT_SHARE
from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import Pipeline
from ingestor.tree.build import TreeBuilder, TreeParams
from ingestor.tree.invariants import violations
from ingestor.tree.repair import charged
from models_store import ModelStore
from retriever import Embedder
from retriever.edge_store import EdgeNodeStore
from testkit.data import SQUAD, proc_status_mb

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
        # Without the SQuAD file (a CI checkout without the benchmark data) every document is generated.
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
    summary_tokens: int = 0  # the updates' (ingestor.tree.repair.charged)
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
    rss = proc_status_mb().get("VmRSS")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if rss is None else rss


def make_pipeline(
    state_dir: Path,
    embedder: Embedder,
    summarizer: Any,
    *,
    chunk_tokens: int = 250,
    n_epochs: int = 200,
    seed: int = 0,
    refit_share: float = REFIT_SHARE,
) -> Pipeline:
    builder = TreeBuilder(
        embedder,
        summarizer,
        lambda: TreeClusterer(random_state=seed, n_epochs=n_epochs),
        TreeParams(refit_share=refit_share),
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
    params = p.context.builder.summaries.params
    bad = violations(state, min_top_nodes=params.min_top_nodes, max_layers=params.max_layers)
    assert not bad, f"{len(bad)} invariant(s) broken, first: {bad[:5]}"
    stored = set(p.context.store.iter_ids(TREE))
    assert stored == set(state.nodes), (
        f"store and state disagree: {len(stored - set(state.nodes))} extra points, "
        f"{len(set(state.nodes) - stored)} missing"
    )
    for payload in p.context.store.retrieve(list(state.nodes)):
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
            self.stats.summary_tokens += charged(report.stats)
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
