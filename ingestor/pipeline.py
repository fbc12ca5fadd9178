"""The data path, short and visible: folder → chunks → embeddings → tree → Qdrant → state.

An update is: compute in memory → upsert new/changed points (idempotent ids) → commit the state
atomically → delete points no longer referenced. A crash between any two steps leaves either the
previous state with extra points (deleted at the next commit) or the new state fully stored.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ingestor.adrap import TreeUpdater, UpdateStats
from ingestor.chunking import chunk_text
from ingestor.errors import SourceError, TreeError
from ingestor.reading import Document, iter_documents, read_document
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
        drift_threshold: float = 0.3,
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
        self.drift_threshold = drift_threshold

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
            doc.text,
            max_tokens=self.chunk_tokens,
            overlap=self.chunk_overlap,
            tokenizer=self.tokenizer,
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
            tree=self.tree,
            root=str(root),
            embed_model=self.embedder.model_id,
            dim=self.embedder.dim,
        )
        previous = load_state(self.models, self.tree, self.embedder)
        if previous is not None:  # a rebuild re-summarises only what changed
            state.summary_cache = previous.summary_cache
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
        built.seconds = stats.seconds | built.seconds  # read and embed stages first
        report.stats = stats = built

        t0 = time.perf_counter()
        self.store_state(state, progress)
        stats.add_time("store", time.perf_counter() - t0)
        report.leaves = len(leaves)
        report.layers = state.layer_counts()
        report.seconds = time.perf_counter() - t_start
        return report

    def require_state(self) -> TreeState:
        """Return the committed state, or explain that the tree must be built first."""
        state = load_state(self.models, self.tree, self.embedder)
        if state is None:
            raise TreeError(
                f"tree {self.tree!r} has not been built in {self.models.root.parent}; "
                "run `adrap build DIR` first"
            )
        return state

    def collect(
        self, state: TreeState, paths: list[Path], report: UpdateReport
    ) -> tuple[list[Document], list[str]]:
        """Read ``paths`` (files or folders under the tree's root): changed docs and vanished sources."""
        root = Path(state.root)
        docs: list[Document] = []
        gone: list[str] = []
        kwargs = {} if self.ignore is None else {"ignore": self.ignore}
        for path in paths:
            path = path.resolve()
            try:
                rel = path.relative_to(root).as_posix()
            except ValueError:
                raise TreeError(
                    f"{str(path)!r} is outside the tree's root {state.root!r}; add files under it "
                    "or build another tree (ADRAP_TREE=...)"
                ) from None
            prefix = "" if rel == "." else rel + "/"
            if not path.exists():
                gone.extend(s for s in state.sources if s == rel or s.startswith(prefix))
                continue
            if path.is_file():
                found: list[tuple[Path, Document | SourceError]] = []
                try:
                    found.append((path, read_document(path, root, max_bytes=self.max_file_bytes)))
                except SourceError as exc:
                    found.append((path, exc))
            else:
                found = list(iter_documents(path, max_bytes=self.max_file_bytes, **kwargs))
            seen = set()
            for p, item in found:
                if isinstance(item, SourceError):
                    log.warning("skipped %s: %s", p, item)
                    report.skipped.append((str(p), str(item)))
                    continue
                if path.is_dir():
                    item = replace(item, source=prefix + item.source)
                seen.add(item.source)
                docs.append(item)
            if path.is_dir():
                gone.extend(s for s in state.sources if s.startswith(prefix) and s not in seen)
        return docs, gone

    def update(self, paths: list[Path], *, remove: bool = False) -> UpdateReport:
        """Bring the tree up to date with ``paths`` (``remove``: drop those sources) using adRAP."""
        t0 = time.perf_counter()
        report = UpdateReport()
        state = self.require_state()
        docs: list[Document] = []
        if remove:
            gone = self.sources_under(state, paths)
        else:
            docs, gone = self.collect(state, paths, report)
        self.apply(state, docs, gone, report)
        report.seconds = time.perf_counter() - t0
        return report

    def sources_under(self, state: TreeState, paths: list[Path]) -> list[str]:
        """Return the sources of the tree named by ``paths`` (files or folders, existing or not)."""
        root = Path(state.root)
        out: list[str] = []
        for path in paths:
            try:
                rel = path.resolve().relative_to(root).as_posix()
            except ValueError:
                raise TreeError(
                    f"{str(path)!r} is outside the tree's root {state.root!r}"
                ) from None
            prefix = "" if rel == "." else rel + "/"
            found = [s for s in state.sources if s == rel or s.startswith(prefix)]
            if not found:
                raise TreeError(
                    f"{str(path)!r} is not in tree {state.tree!r} (no document at or under "
                    f"{rel!r}); `adrap status` shows the tree"
                )
            out.extend(found)
        return out

    def apply(
        self, state: TreeState, docs: list[Document], gone: list[str], report: UpdateReport
    ) -> None:
        """Apply changed documents and removed sources as one adRAP batch, then store it."""
        added: list[Node] = []
        removed: list[str] = []
        touched: list[str] = []
        for doc in docs:
            old = state.sources.get(doc.source)
            if old is not None and old.content_hash == doc.content_hash:
                report.files_unchanged += 1
                continue
            leaves = self.leaves_of(doc)
            new_ids = {n.node_id for n in leaves}
            old_ids = set(old.node_ids) if old else set()
            if old is not None:
                removed.extend(i for i in old.node_ids if i not in new_ids)
            for n in leaves:
                if n.node_id in old_ids:  # unchanged chunk: keep the node, refresh provenance
                    kept = state.nodes[n.node_id]
                    kept.chunk_index, kept.char_start, kept.char_end = (
                        n.chunk_index,
                        n.char_start,
                        n.char_end,
                    )
                    touched.append(n.node_id)
                else:
                    added.append(n)
            state.sources[doc.source] = SourceEntry(
                doc.content_hash, doc.size, doc.mtime, [n.node_id for n in leaves]
            )
            report.files_changed += old is not None
            report.files_added += old is None
        for source in dict.fromkeys(gone):
            entry = state.sources.pop(source, None)
            if entry is not None:
                removed.extend(entry.node_ids)
                report.files_removed += 1
        if not added and not removed and not touched:
            return
        vecs = self.embedder.embed_documents([n.text for n in added])
        for node, vec in zip(added, vecs, strict=True):
            state.nodes[node.node_id] = node
            state.vectors[node.node_id] = vec
        n_leaves = len(state.ids_in_layer(0)) - len(removed)
        drift = (
            state.added_since_build + state.removed_since_build + len(added) + len(removed)
        ) / max(1, state.leaves_at_build)
        needs_layers = not state.layers and n_leaves > self.builder.params.min_top_nodes
        if drift > self.drift_threshold or needs_layers:
            for node_id in removed:
                state.nodes.pop(node_id, None)
                state.vectors.pop(node_id, None)
            stats = self.builder.build(state)
            report.rebuilt = True
            report.stats = UpdateStats(
                leaves_added=len(added),
                leaves_removed=len(removed),
                summaries_regenerated=stats.summary_calls,
                summary_cache_hits=stats.cache_hits,
                summary_tokens=stats.summary_tokens,
            )
            self.store_state(state)
            return
        report.stats = TreeUpdater(self.builder).apply(state, [n.node_id for n in added], removed)
        report.stats.upserted.update(touched)
        self.store_changes(state, report.stats.upserted, report.stats.deleted)

    def store_changes(self, state: TreeState, upserted: set[str], deleted: set[str]) -> None:
        """Upsert changed nodes, commit the state, then delete the points of removed nodes."""
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        ids = sorted(i for i in upserted if i in state.nodes)
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))
        self._commit(state)
        gone = sorted(i for i in deleted if i not in state.nodes)
        if gone:
            self.store.delete(gone)

    def rebuild(self, progress: Progress = _noop) -> BuildReport:
        """Rebuild every summary layer over the current leaves (summary cache reused)."""
        t0 = time.perf_counter()
        state = self.require_state()
        report = BuildReport(files=len(state.sources), leaves=len(state.ids_in_layer(0)))
        report.stats = self.builder.build(state, progress)
        self.store_state(state, progress)
        report.layers = state.layer_counts()
        report.seconds = time.perf_counter() - t0
        return report

    def _commit(self, state: TreeState) -> None:
        try:
            commit_state(self.models, state)
        except (OSError, ModelStoreError) as exc:
            raise TreeError(
                f"cannot commit the tree state to {self.models.root}: {exc}; check free space and "
                "permissions of ADRAP_STATE_DIR, then run the command again"
            ) from exc

    def store_state(self, state: TreeState, progress: Progress = _noop) -> None:
        """Upsert every node, commit the state, then delete points the state no longer has."""
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        ids = list(state.nodes)
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))
            progress("store", start + len(batch), len(ids))
        self.store.optimize()  # embedded: build the HNSW index once, after the bulk write
        self._commit(state)
        orphans = [i for i in self.store.iter_ids(self.tree) if i not in state.nodes]
        if orphans:
            self.store.delete(orphans)
            log.info("deleted %d points no longer in tree %r", len(orphans), self.tree)

    # --- the daemon's start-up reconciliation and batches ----------------------------------------

    def reconcile(self, root: Path, progress: Progress = _noop) -> UpdateReport:
        """Bring the stored tree to agree with the folder ``root`` after any crash or downtime.

        First run (no state): a full ``build``. Otherwise the folder is compared with the source
        index by content hash and the difference applied as one adRAP batch; then the store's
        points of the tree are compared with the state's nodes (see ``reconcile_store``).

        Raises:
            TreeError: the state was built over another root folder.
        """
        t0 = time.perf_counter()
        report = UpdateReport()
        root = root.resolve()
        state = load_state(self.models, self.tree, self.embedder)
        if state is None:
            built = self.build(root, progress)
            report.files_added = built.files
            report.skipped = built.skipped
            report.stats = UpdateStats(
                leaves_added=built.leaves,
                summaries_regenerated=built.stats.summary_calls,
                summary_cache_hits=built.stats.cache_hits,
            )
            report.rebuilt = True
            report.seconds = time.perf_counter() - t0
            return report
        if Path(state.root) != root:
            raise TreeError(
                f"tree {self.tree!r} in {self.models.root.parent} was built over {state.root!r}, "
                f"not {str(root)!r}; watch that folder, or use another ADRAP_TREE or ADRAP_STATE_DIR"
            )
        docs, gone = self.collect(state, [root], report)
        self.apply_batch(state, docs, gone, report)
        self.reconcile_store(state)
        report.seconds = time.perf_counter() - t0
        return report

    def reconcile_store(self, state: TreeState) -> tuple[int, int]:
        """Make the store's points of the tree equal to the state's nodes, payloads included.

        Deletes points the state does not reference (orphans of an update interrupted before its
        last step) and upserts nodes whose point is missing or whose payload differs (an update
        interrupted between its upsert and its commit). Returns ``(deleted, upserted)``.
        """
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        stored = set(self.store.iter_ids(self.tree))
        orphans = sorted(stored - state.nodes.keys())
        stale = [i for i in state.nodes if i not in stored]
        present = [i for i in state.nodes if i in stored]
        for start in range(0, len(present), UPSERT_BATCH):
            batch = present[start : start + UPSERT_BATCH]
            found = {p.node_id: p for p in self.store.retrieve(batch)}
            for want in state.payloads(batch):
                if found.get(want.node_id) != want:
                    stale.append(want.node_id)
        for start in range(0, len(stale), UPSERT_BATCH):
            batch = stale[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))
        if orphans:
            self.store.delete(orphans)
        if orphans or stale:
            log.info(
                "reconciled store of tree %r: deleted %d orphan points, re-stored %d nodes",
                self.tree,
                len(orphans),
                len(stale),
            )
        return len(orphans), len(stale)

    def apply_batch(
        self, state: TreeState, docs: list[Document], gone: list[str], report: UpdateReport
    ) -> None:
        """``apply``, reusing the vectors of removed leaves whose text comes back in ``docs``.

        A renamed or moved file is a removed source plus a new one with the same content; leaf
        ids include the source path, so its leaves get new ids, but their vectors are taken from
        the removed leaves instead of being embedded again (summaries come from the summary cache).
        The whole batch is one adRAP update and one commit.
        """
        known: dict[str, NDArray[np.float32]] = {}
        for source in gone:
            entry = state.sources.get(source)
            for node_id in entry.node_ids if entry else ():
                node = state.nodes.get(node_id)
                if node is not None and node_id in state.vectors:
                    known[node.text] = state.vectors[node_id]
        inner = self.embedder
        if known:
            self.embedder = _ReusingEmbedder(inner, known)
        try:
            self.apply(state, docs, gone, report)
        finally:
            self.embedder = inner


class _ReusingEmbedder:
    """An embedder that returns known vectors for known texts and embeds only the rest."""

    def __init__(self, inner: Embedder, known: dict[str, NDArray[np.float32]]) -> None:
        self.inner = inner
        self.known = known
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.reused = 0

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo = [i for i, t in enumerate(texts) if t not in self.known]
        if todo:
            out[todo] = self.inner.embed_documents([texts[i] for i in todo])
        for i, text in enumerate(texts):
            if text in self.known:
                out[i] = self.known[text]
        self.reused += len(texts) - len(todo)
        if self.reused:
            log.debug("reused %d leaf vectors of removed sources", len(texts) - len(todo))
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.inner.embed_query(text)


@dataclass
class UpdateReport:
    """What ``update`` did."""

    files_added: int = 0
    files_changed: int = 0
    files_removed: int = 0
    files_unchanged: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    stats: UpdateStats = field(default_factory=UpdateStats)
    rebuilt: bool = False
    seconds: float = 0.0

    def summary(self) -> str:
        """Return the one-line account printed by the CLI and logged by the daemon."""
        s = self.stats
        return (
            f"files +{self.files_added} ~{self.files_changed} -{self.files_removed} "
            f"(={self.files_unchanged}); leaves +{s.leaves_added} -{s.leaves_removed}; clusters "
            f"changed {s.clusters_changed}, created {s.clusters_created}, split {s.clusters_split}, "
            f"removed {s.clusters_removed}; summaries regenerated {s.summaries_regenerated} "
            f"(cache hits {s.summary_cache_hits}, {s.summary_tokens} tokens); "
            f"{'full rebuild (drift); ' if self.rebuilt else ''}"
            f"{self.seconds:.2f}s"
        )


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
