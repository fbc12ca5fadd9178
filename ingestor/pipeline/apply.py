"""The apply stage: changed and removed documents applied to a built tree as one adRAP batch.

A batch is first turned into leaf changes in memory (:meth:`ApplyStage.leaf_changes`: new
leaves, removed leaves, kept leaves whose place in the document moved), then applied: the new
leaves are embedded and written at once (searchable before adRAP places them), adRAP updates
the layers (or, past the drift threshold, the build stage rebuilds them), and the context
stores the result (intent, upserts, commit, deletes).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ingestor.pipeline.build import BuildStage
from ingestor.pipeline.collect import Collector
from ingestor.pipeline.context import TreeContext, bulk_writes
from ingestor.pipeline.reports import UpdateReport
from ingestor.pipeline.vectors import reuse_removed
from ingestor.read.documents import Document
from ingestor.tree.adrap import TreeUpdater, UpdateStats
from ingestor.tree.state import Node, SourceEntry, TreeState
from retriever import Embedder

__all__ = ["ApplyStage", "LeafChanges"]

log = logging.getLogger(__name__)


@dataclass
class LeafChanges:
    """What a batch changes in the leaves, computed in memory before anything is written.

    Attributes:
        added: new leaves (not yet embedded).
        removed: ids of leaves whose text left their document, or whose source is gone.
        touched: ids of kept leaves whose offsets, section or locator changed (re-stored).
        refreshed: a source's stat record changed while its text did not (a commit, no write).
    """

    added: list[Node] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)
    refreshed: bool = False


class ApplyStage:
    """Updates a built tree in place with adRAP. Given the stages and settings it uses.

    Attributes:
        context: the tree's adapters and crash-safe writes (shared with the build stage).
        build: the build stage: chunks a changed document, rebuilds the layers on drift.
        collector: reads what changed (:meth:`update`).
        drift_threshold: leaves added and removed since the last build, over the leaves then,
            above which an update rebuilds the layers instead of placing leaves with adRAP.
        leaves_first: write an update's new leaves before adRAP places them, so they are
            searchable at once.
    """

    def __init__(
        self,
        context: TreeContext,
        build: BuildStage,
        collector: Collector,
        *,
        drift_threshold: float = 0.3,
        leaves_first: bool = True,
    ) -> None:
        self.context = context
        self.build = build
        self.collector = collector
        self.drift_threshold = drift_threshold
        self.leaves_first = leaves_first

    def update(self, paths: list[Path], *, remove: bool = False) -> UpdateReport:
        """Bring the tree up to date with ``paths`` (``remove``: drop those sources) using adRAP."""
        t0 = time.perf_counter()
        report = UpdateReport()
        state = self.context.require_state(recover=True)
        docs: list[Document] = []
        if remove:
            gone = self.collector.sources_under(state, paths)
        else:
            docs, gone = self.collector.collect(state, paths, report)
        self.apply(state, docs, gone, report)
        report.seconds = time.perf_counter() - t0
        return report

    def apply_batch(
        self, state: TreeState, docs: list[Document], gone: list[str], report: UpdateReport
    ) -> None:
        """``apply``, reusing the vectors of removed leaves whose text comes back in ``docs``.

        A renamed or moved file is a removed source plus a new one with the same content; leaf
        ids include the source path, so its leaves get new ids, but their vectors are taken from
        the removed leaves instead of being embedded again (summaries come from the summary cache).
        The whole batch is one adRAP update and one commit.
        """
        embedder = reuse_removed(state, gone, self.context.embedder)
        self.apply(state, docs, gone, report, embedder=embedder)

    def apply(
        self,
        state: TreeState,
        docs: list[Document],
        gone: list[str],
        report: UpdateReport,
        *,
        embedder: Embedder | None = None,
    ) -> None:
        """Apply changed documents and removed sources as one adRAP batch, then store it.

        Args:
            embedder: embeds the batch's new leaves; None: the context's. :meth:`apply_batch`
                passes one that gives removed leaves' vectors back for texts that return (see
                :func:`~ingestor.pipeline.vectors.reuse_removed`). The collection's shape and the
                summaries' vectors always come from the context's embedder and the builder.
        """
        ctx = self.context
        changes = self.leaf_changes(state, docs, gone, report)
        added, removed, touched = changes.added, changes.removed, changes.touched
        if not added and not removed and not touched:
            if (
                changes.refreshed
            ):  # only stat records changed: a commit of those rows, no store write
                ctx.store_changes(state, set(), set())
                report.state_bytes = state.last_commit_bytes
            return
        # Phase lines (debug): bench/crash.py reads them to place its kills and report where
        # each one landed; they also date each step of a slow update under -v.
        log.debug("update: embedding %d new leaves (%d removed)", len(added), len(removed))
        leaf_embedder = embedder if embedder is not None else ctx.embedder
        vecs = leaf_embedder.embed_documents([n.text for n in added])
        for node, vec in zip(added, vecs, strict=True):
            state.nodes[node.node_id] = node
            state.vectors[node.node_id] = vec
        if self.leaves_first and added:  # searchable now, whether adRAP or a rebuild places them
            log.debug("update: writing %d new leaves first", len(added))
            ctx.show_leaves(state, [n.node_id for n in added])
        n_leaves = state.layer_counts().get(0, 0) - len(removed)
        drift = (
            state.added_since_build + state.removed_since_build + len(added) + len(removed)
        ) / max(1, state.leaves_at_build)
        needs_layers = not state.layers and n_leaves > ctx.builder.params.min_top_nodes
        if drift > self.drift_threshold or needs_layers:
            self._rebuild_layers(state, changes, report)
            return
        log.debug("update: placing %d leaves, removing %d (adRAP)", len(added), len(removed))
        report.stats = TreeUpdater(ctx.builder).apply(state, [n.node_id for n in added], removed)
        report.stats.upserted.update(touched)
        ctx.store_changes(state, report.stats.upserted, report.stats.deleted)
        report.state_bytes = state.last_commit_bytes

    def leaf_changes(
        self, state: TreeState, docs: list[Document], gone: list[str], report: UpdateReport
    ) -> LeafChanges:
        """Turn changed documents and gone sources into leaf changes, in ``state`` only.

        The sources' entries are updated (or dropped) and kept leaves get their new offsets,
        section and locator; new leaves are returned, not yet in ``state``. Nothing is stored.
        """
        out = LeafChanges()
        for doc in docs:
            old = state.sources.get(doc.source)
            if old is not None and old.content_hash == doc.content_hash:
                report.files_unchanged += 1
                if (old.size, old.mtime_ns, old.inode) != (doc.size, doc.mtime_ns, doc.inode):
                    # same text, new stat (touched, or read racily before): trust the new one,
                    # so that the next restart skips it by stat instead of reading it again
                    state.sources[doc.source] = SourceEntry(
                        old.content_hash, doc.size, doc.mtime, old.node_ids, doc.mtime_ns, doc.inode
                    )
                    out.refreshed = True
                continue
            leaves = self.build.leaves_of(doc)
            new_ids = {n.node_id for n in leaves}
            old_ids = set(old.node_ids) if old else set()
            if old is not None:
                out.removed.extend(i for i in old.node_ids if i not in new_ids)
            for n in leaves:
                if n.node_id in old_ids:  # unchanged chunk: keep the node, refresh provenance
                    kept = state.nodes[n.node_id]
                    kept.chunk_index, kept.char_start, kept.char_end = (
                        n.chunk_index,
                        n.char_start,
                        n.char_end,
                    )
                    kept.section, kept.locator = n.section, n.locator
                    out.touched.append(n.node_id)
                else:
                    out.added.append(n)
            state.sources[doc.source] = SourceEntry(
                doc.content_hash,
                doc.size,
                doc.mtime,
                [n.node_id for n in leaves],
                doc.mtime_ns,
                doc.inode,
            )
            report.files_changed += old is not None
            report.files_added += old is None
        for source in dict.fromkeys(gone):
            entry = state.sources.pop(source, None)
            if entry is not None:
                out.removed.extend(entry.node_ids)
                report.files_removed += 1
        return out

    def _rebuild_layers(self, state: TreeState, changes: LeafChanges, report: UpdateReport) -> None:
        """Past the drift threshold: drop the removed leaves, rebuild every layer, store it all."""
        ctx = self.context
        for node_id in changes.removed:
            state.nodes.pop(node_id, None)
            state.vectors.pop(node_id, None)
        # Paid summaries are checkpointed into the state's cache as they come (a drift rebuild
        # with an LLM is long; a kill or a failed batch keeps them for the retry).
        stats = self.build.build_layers(state, state.rows, lambda *_: None)
        report.rebuilt = True
        report.stats = UpdateStats(
            leaves_added=len(changes.added),
            leaves_removed=len(changes.removed),
            summaries_regenerated=stats.summary_calls,
            summary_cache_hits=stats.cache_hits,
            summary_tokens=stats.summary_tokens,
        )
        with bulk_writes(ctx.store):  # one index build, as `adrap rebuild`
            ctx.store_state(state)
        if state.intent_open:  # the new leaves' (show_leaves): committed, nothing to delete
            ctx.drop_intent(state)
        report.state_bytes = state.last_commit_bytes
