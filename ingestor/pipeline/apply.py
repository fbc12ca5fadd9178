"""Apply changed and removed documents to a built tree as one adRAP batch, then store it."""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ingestor.errors import SourceError, SourceGoneError, SourceUnavailableError, TreeError
from ingestor.pipeline.build import UPSERT_BATCH, BuildStage, bulk_writes, stat_or_none
from ingestor.pipeline.reports import UpdateReport
from ingestor.pipeline.unread import content_stale_reason
from ingestor.read.documents import Document, read_document
from ingestor.read.listing import confirmed_gone, iter_files
from ingestor.tree.adrap import TreeUpdater, UpdateStats
from ingestor.tree.state import Node, SourceEntry, TreeState
from retriever import Embedder, StoreError

log = logging.getLogger(__name__)


class ApplyStage(BuildStage):
    """Adds in-place updates (adRAP) to the build stage."""

    def collect(
        self,
        state: TreeState,
        paths: list[Path],
        report: UpdateReport,
        held: Callable[[str, Path], bool] | None = None,
    ) -> tuple[list[Document], list[str]]:
        """Read ``paths`` (files or folders under the tree's root): changed docs and gone sources.

        Only a file that is gone is returned as gone: its name is absent from a successful listing
        of its folder. A file that exists but cannot be read now (EACCES, EBUSY, EIO), or whose new
        version cannot be used, keeps its leaves and is recorded as stale in ``self.unread``; a
        folder that cannot be listed keeps everything under it. Skips are logged once per file
        version; a file already skipped in this version is not read again. ``held(source, path)``
        names files a folder's listing keeps without reading (the daemon's quarantine).
        """
        root = Path(state.root)
        docs: list[Document] = []
        gone: list[str] = []
        kwargs = {} if self.ignore is None else {"ignore": self.ignore}
        for path in paths:
            path = Path(os.path.abspath(path))
            try:
                rel = path.relative_to(root).as_posix()
            except ValueError:
                try:
                    rel = path.resolve().relative_to(root).as_posix()
                    path = root / rel
                except ValueError:
                    raise TreeError(
                        f"{str(path)!r} is outside the tree's root {state.root!r}; add files "
                        "under it or build another tree (ADRAP_TREE=...)"
                    ) from None
            prefix = "" if rel == "." else rel + "/"
            try:
                is_dir = stat.S_ISDIR(os.stat(path).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                if confirmed_gone(path, root):
                    gone.extend(_sources_at(state, rel))
                    self.unread.clear_under(rel if rel != "." else "")
                else:
                    self._unavailable(state, rel, "its folder cannot be listed now", report)
                continue
            except OSError as exc:
                self._unavailable(state, rel, f"cannot be reached now ({exc.strerror})", report)
                continue
            if not is_dir:
                self._read(state, root, path, stat_or_none(path), docs, report)
                continue
            seen, kept = self._collect_folder(state, path, root, kwargs, docs, report, held)
            self.unread.clear_unlisted(prefix, seen, kept)
            gone.extend(
                s
                for s in state.sources.keys_with_prefix(prefix)
                if s not in seen and not s.startswith(tuple(kept))
            )
        self.unread.flush()
        return docs, gone

    def _collect_folder(
        self,
        state: TreeState,
        folder: Path,
        root: Path,
        kwargs: dict[str, Any],
        docs: list[Document],
        report: UpdateReport,
        held: Callable[[str, Path], bool] | None,
    ) -> tuple[set[str], list[str]]:
        """Read the files under ``folder`` that changed; skip the rest by (size, mtime_ns, inode).

        Returns the sources seen in the listing (read or not) and the folders that could not be
        listed (``sub/``: every source under them is kept).
        """
        seen: set[str] = set()
        kept: list[str] = []
        unchanged = 0
        for p, error in iter_files(folder, **kwargs):
            source = _source_of(p, root)
            if error is not None:  # a folder: unreadable now (kept), or a link that is refused
                if isinstance(error, SourceUnavailableError):
                    kept.append(source + "/")
                    self._unavailable(state, source + "/", str(error), report)
                else:
                    self._skip(source, str(error), None, report)
                continue
            seen.add(source)
            if held is not None and held(source, p):
                continue
            st = stat_or_none(p)
            entry = state.sources.get(source)
            if entry is not None and st is not None and entry.unchanged(st):
                unchanged += 1
                self.unread.clear(source)
                continue
            self._read(state, root, p, st, docs, report)
        report.files_unchanged += unchanged
        return seen, kept

    def _read(
        self,
        state: TreeState,
        root: Path,
        path: Path,
        st: os.stat_result | None,
        docs: list[Document],
        report: UpdateReport,
    ) -> None:
        """Read one file (``st``: its stat before the read) into ``docs``, or record why not.

        Never a deletion here. A version the ledger already knows to fail is not read again.
        """
        source = _source_of(path, root)
        if self.unread.known(source, st) is not None:
            return  # recorded and logged for this version already
        try:
            doc = read_document(
                path,
                root,
                max_bytes=self.max_file_bytes,
                ocr=self.ocr,
                text_suffixes=self.text_suffixes,
            )
        except SourceGoneError as exc:
            # vanished mid-read: a later event (or rescan) decides whether it is gone
            self._unavailable(state, source, str(exc), report)
        except SourceUnavailableError as exc:
            self._unavailable(state, source, str(exc), report, st)
        except SourceError as exc:
            if source not in state.sources:
                self._skip(source, str(exc), st, report)
                return
            reason = content_stale_reason(str(exc))
            if self.unread.note(source, "stale", reason, st, kept=True):
                log.warning("stale %s: %s", source, exc)
                report.stale.append((source, reason))
        else:
            docs.append(doc)
            self.unread.clear(doc.source)

    def _skip(
        self, source: str, reason: str, st: os.stat_result | None, report: UpdateReport
    ) -> None:
        if self.unread.note(source, "skipped", reason, st, kept=False):
            log.warning("skipped %s: %s", source, reason)
            report.skipped.append((source, reason))

    def _unavailable(
        self,
        state: TreeState,
        source: str,
        reason: str,
        report: UpdateReport,
        st: os.stat_result | None = None,
    ) -> None:
        kept = source in state.sources or bool(
            source.endswith("/") and state.sources.keys_with_prefix(source)
        )
        if self.unread.note(source, "stale", reason, st, kept=kept):
            log.warning("stale %s: %s", source, reason)
            report.stale.append((source, reason))

    def update(self, paths: list[Path], *, remove: bool = False) -> UpdateReport:
        """Bring the tree up to date with ``paths`` (``remove``: drop those sources) using adRAP."""
        t0 = time.perf_counter()
        report = UpdateReport()
        state = self.require_state(recover=True)
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
            found = _sources_at(state, rel)
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
        refreshed = False
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
                    refreshed = True
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
                    kept.section, kept.locator = n.section, n.locator
                    touched.append(n.node_id)
                else:
                    added.append(n)
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
                removed.extend(entry.node_ids)
                report.files_removed += 1
        if not added and not removed and not touched:
            if refreshed:  # only stat records changed: a commit of those rows, no store write
                self.store_changes(state, set(), set())
                report.state_bytes = state.last_commit_bytes
            return
        # Phase lines (debug): bench/crash.py reads them to place its kills and report where
        # each one landed; they also date each step of a slow update under -v.
        log.debug("update: embedding %d new leaves (%d removed)", len(added), len(removed))
        vecs = self.embedder.embed_documents([n.text for n in added])
        for node, vec in zip(added, vecs, strict=True):
            state.nodes[node.node_id] = node
            state.vectors[node.node_id] = vec
        if self.leaves_first and added:  # searchable now, whether adRAP or a rebuild places them
            log.debug("update: writing %d new leaves first", len(added))
            self.show_leaves(state, [n.node_id for n in added])
        n_leaves = state.layer_counts().get(0, 0) - len(removed)
        drift = (
            state.added_since_build + state.removed_since_build + len(added) + len(removed)
        ) / max(1, state.leaves_at_build)
        needs_layers = not state.layers and n_leaves > self.builder.params.min_top_nodes
        if drift > self.drift_threshold or needs_layers:
            for node_id in removed:
                state.nodes.pop(node_id, None)
                state.vectors.pop(node_id, None)
            # Paid summaries are checkpointed into the state's cache as they come (a drift rebuild
            # with an LLM is long; a kill or a failed batch keeps them for the retry).
            stats = self.build_layers(state, state.rows, lambda *_: None)
            report.rebuilt = True
            report.stats = UpdateStats(
                leaves_added=len(added),
                leaves_removed=len(removed),
                summaries_regenerated=stats.summary_calls,
                summary_cache_hits=stats.cache_hits,
                summary_tokens=stats.summary_tokens,
            )
            with bulk_writes(self.store):  # one index build, as `adrap rebuild`
                self.store_state(state)
            if state.intent_open:  # the new leaves' (show_leaves): committed, nothing to delete
                self._intent(state, None, None)
            report.state_bytes = state.last_commit_bytes
            return
        log.debug("update: placing %d leaves, removing %d (adRAP)", len(added), len(removed))
        report.stats = TreeUpdater(self.builder).apply(state, [n.node_id for n in added], removed)
        report.stats.upserted.update(touched)
        self.store_changes(state, report.stats.upserted, report.stats.deleted)
        report.state_bytes = state.last_commit_bytes

    def show_leaves(self, state: TreeState, ids: list[str]) -> None:
        """Make new leaves searchable before adRAP places them (file → searchable is the
        embedding, not the summaries over it): they are written without parents, under an intent,
        so a crash or a failed update before the commit deletes them again (:meth:`recover`)."""
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        self._intent(state, ids, [])
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))

    def store_changes(self, state: TreeState, upserted: set[str], deleted: set[str]) -> None:
        """Upsert changed nodes, commit the state, then delete the points of removed nodes.

        The intent (which points are written and deleted) is recorded first, so that a crash at
        any step is repaired by :meth:`recover` from those ids alone.
        """
        self.store.ensure_collection(self.embedder.dim, self.embedder.model_id)
        ids = sorted(i for i in upserted if i in state.nodes)
        gone = sorted(i for i in deleted if i not in state.nodes)
        self._intent(state, ids, gone)
        log.debug("update: intent recorded; upserting %d points", len(ids))
        for start in range(0, len(ids), UPSERT_BATCH):
            batch = ids[start : start + UPSERT_BATCH]
            self.store.upsert(state.payloads(batch), state.matrix(batch))
        log.debug("update: upserted; committing the state")
        self._commit(state)
        log.debug(
            "update: committed generation %d; deleting %d points", state.generation, len(gone)
        )
        if gone:
            self.store.delete(gone)
        log.debug("update: deleted; dropping the intent")
        self._intent(state, None, None)
        log.debug("update: done")

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
        old = [
            node
            for source in gone
            for node_id in getattr(state.sources.peek(source), "node_ids", ())
            if (node := state.nodes.peek(node_id)) is not None
        ]
        try:
            vectors = state.matrix([n.node_id for n in old])
        except StoreError as exc:  # points missing after a crash: embed those texts again
            log.info("cannot reuse the vectors of removed leaves (%s); embedding them", exc)
            vectors = np.zeros((0, self.embedder.dim), dtype=np.float32)
        for node, vec in zip(old, vectors, strict=False):
            known[node.text] = vec
        inner = self.embedder
        if known:
            self.embedder = _ReusingEmbedder(inner, known)
        try:
            self.apply(state, docs, gone, report)
        finally:
            self.embedder = inner


def _sources_at(state: TreeState, rel: str) -> list[str]:
    """Return the source ``rel`` if the tree has it, else the sources under folder ``rel``
    (one key lookup or one range scan: never a pass over every source)."""
    if rel != "." and rel in state.sources:
        return [rel]
    return state.sources.keys_with_prefix("" if rel == "." else rel + "/")


def _source_of(path: Path, root: Path) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


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
