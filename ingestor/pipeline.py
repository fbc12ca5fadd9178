"""The data path, short and visible: folder → chunks → embeddings → tree → Qdrant → state.

An update is: compute in memory → upsert new/changed points (idempotent ids) → commit the state
atomically → delete points no longer referenced. A crash between any two steps leaves either the
previous state with extra points (deleted at the next commit) or the new state fully stored.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ingestor.chunking import chunk_text
from ingestor.errors import SourceError, TreeError
from ingestor.reading import Document, iter_documents
from ingestor.state import Node, SourceEntry, TreeState, leaf_id, sha256_text
from ingestor.tokens import Tokenizer, default_tokenizer
from ingestor.tree import BuildStats, Progress, TreeBuilder, _noop
from models_store import ModelStore, ModelStoreError
from retriever import SCHEMA_VERSION, Embedder, NodeStore

log = logging.getLogger(__name__)

UPSERT_BATCH = 512
EMBED_BATCH = 128


@dataclass
class BuildReport:
    """What ``build`` did: files, nodes per layer, skipped files with reasons, and stage times."""

    files: int = 0
    leaves: int = 0
    layers: dict[int, int] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    stats: BuildStats = field(default_factory=BuildStats)
    seconds: float = 0.0


def state_name(tree: str) -> str:
    """Return the models_store object name of a tree's state."""
    return f"tree-{tree}"


def load_state(models: ModelStore, tree: str, embedder: Embedder) -> TreeState | None:
    """Return the committed state of ``tree``, or None if it was never built.

    Raises:
        models_store.IncompatibleModelError: written for another embedding model or libraries.
    """
    name = state_name(tree)
    if not models.exists(name):
        return None
    state = models.load(name, expect={"embed_model": embedder.model_id, "dim": embedder.dim})
    if not isinstance(state, TreeState):
        raise TreeError(f"{models.root / name} does not hold a tree state; delete it and rebuild")
    return state


def commit_state(models: ModelStore, state: TreeState) -> None:
    """Persist ``state`` atomically as the next generation."""
    state.generation += 1
    models.save(
        state_name(state.tree),
        state,
        extra={"embed_model": state.embed_model, "dim": state.dim, "schema": SCHEMA_VERSION},
    )


class Pipeline:
    """Builds and stores trees. Adapters are passed in; nothing here builds a client."""

    def __init__(
        self,
        *,
        tree: str,
        embedder: Embedder,
        builder: TreeBuilder,
        store: NodeStore,
        models: ModelStore,
        chunk_tokens: int = 250,
        chunk_overlap: int = 50,
        max_file_bytes: int = 50_000_000,
        ignore: list[str] | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self.tree = tree
        self.embedder = embedder
        self.builder = builder
        self.store = store
        self.models = models
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.max_file_bytes = max_file_bytes
        self.ignore = ignore
        self.tokenizer = tokenizer or default_tokenizer()

    def read(self, root: Path, report: BuildReport, progress: Progress) -> list[Document]:
        """Read every supported file under ``root``; log and record each skipped one."""
        docs: list[Document] = []
        kwargs = {} if self.ignore is None else {"ignore": self.ignore}
        for path, item in iter_documents(root, max_bytes=self.max_file_bytes, **kwargs):
            if isinstance(item, SourceError):
                log.warning("skipped %s: %s", path, item)
                report.skipped.append((str(path), str(item)))
                continue
            docs.append(item)
            progress("read", len(docs), 0)
        return docs

    def leaves_of(self, doc: Document) -> list[Node]:
        """Chunk one document into leaf nodes (ids stable while a chunk's text is unchanged)."""
        seen: Counter[str] = Counter()
        out = []
        chunks = chunk_text(
            doc.text, max_tokens=self.chunk_tokens, overlap=self.chunk_overlap, tokenizer=self.tokenizer
        )
        for chunk in chunks:
            digest = sha256_text(chunk.text)
            node_id = leaf_id(self.tree, doc.source, digest, seen[digest])
            seen[digest] += 1
            out.append(
                Node(
                    node_id=node_id,
                    layer=0,
                    text=chunk.text,
                    n_tokens=chunk.n_tokens,
                    content_hash=digest,
                    sources=frozenset({doc.source}),
                    source=doc.source,
                    chunk_index=chunk.index,
                    char_start=chunk.char_start,
                    char_end=chunk.char_end,
                )
            )
        return out

    def build(self, root: Path, progress: Progress = _noop) -> BuildReport:
        """Build the whole tree over ``root`` from scratch and store it."""
        t_start = time.perf_counter()
        report = BuildReport()
        stats = report.stats
        root = root.resolve()
        state = TreeState(
            tree=self.tree, root=str(root), embed_model=self.embedder.model_id, dim=self.embedder.dim
        )
        previous = load_state(self.models, self.tree, self.embedder)
        if previous is not None:
            state.summary_cache = previous.summary_cache  # a rebuild re-summarises only what changed
            state.generation = previous.generation

        t0 = time.perf_counter()
        docs = self.read(root, report, progress)
        leaves: list[Node] = []
        for doc in docs:
            doc_leaves = self.leaves_of(doc)
            leaves.extend(doc_leaves)
            state.sources[doc.source] = SourceEntry(
                doc.content_hash, doc.size, doc.mtime, [n.node_id for n in doc_leaves]
            )
        stats.add_time("read_chunk", time.perf_counter() - t0)
        report.files = len(docs)

        t0 = time.perf_counter()
        for start in range(0, len(leaves), EMBED_BATCH):
            batch = leaves[start : start + EMBED_BATCH]
            vecs = self.embedder.embed_documents([n.text for n in batch])
            for node, vec in zip(batch, vecs, strict=True):
                state.nodes[node.node_id] = node
                state.vectors[node.node_id] = vec
            progress("embed leaves", start + len(batch), len(leaves))
        stats.add_time("embed_leaves", time.perf_counter() - t0)

        built = self.builder.build(state, progress)
        for stage, seconds in built.seconds.items():
            stats.add_time(stage, seconds)
        stats.summary_calls = built.summary_calls
        stats.cache_hits = built.cache_hits
        stats.clusters_per_layer = built.clusters_per_layer
        stats.mean_cluster_size = built.mean_cluster_size

        t0 = time.perf_counter()
        self.store_state(state, progress)
        stats.add_time("store", time.perf_counter() - t0)
        report.leaves = len(leaves)
        report.layers = state.layer_counts()
        report.seconds = time.perf_counter() - t_start
        return report

    def store_state(self, state: TreeState, progress: Progress = _noop) -> None:
        """Upsert every node, commit the state, then delete points the state no longer has."""
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        ids = list(state.nodes)
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))
            progress("store", start + len(batch), len(ids))
        try:
            commit_state(self.models, state)
        except (OSError, ModelStoreError) as exc:
            raise TreeError(
                f"cannot commit the tree state to {self.models.root}: {exc}; check free space and "
                "permissions of ADRAP_STATE_DIR, then run the build again"
            ) from exc
        orphans = [i for i in self.store.iter_ids(self.tree) if i not in state.nodes]
        if orphans:
            self.store.delete(orphans)
            log.info("deleted %d points no longer in tree %r", len(orphans), self.tree)


def make_progress_printer(enabled: bool) -> Callable[[str, int, int], None]:
    """Return a progress callback drawing one updating line per stage on stderr."""
    import sys

    last: dict[str, float] = {}

    def show(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        final = total and done >= total
        if not enabled or (not final and now - last.get(stage, 0.0) < 0.2):
            return
        last[stage] = now
        if total:
            width = 30
            filled = int(width * done / total)
            bar = "#" * filled + "." * (width - filled)
            line = f"\r{stage:<16} [{bar}] {done}/{total}"
        else:
            line = f"\r{stage:<16} {done}"
        sys.stderr.write(line + ("\n" if final else ""))
        sys.stderr.flush()

    return show
