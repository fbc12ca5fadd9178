"""Bring the stored tree to agree with its folder after a crash or downtime (the daemon's start)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ingestor.errors import TreeError
from ingestor.pipeline.apply import ApplyStage
from ingestor.pipeline.build import UPSERT_BATCH
from ingestor.pipeline.reports import UpdateReport
from ingestor.tree.adrap import UpdateStats
from ingestor.tree.params import Progress
from ingestor.tree.params import no_progress as _noop
from ingestor.tree.state import TreeState

log = logging.getLogger(__name__)


class Pipeline(ApplyStage):
    """The data path, short and visible: folder → chunks → embeddings → tree → Qdrant → state.

    ``BuildStage`` builds a tree from scratch, ``ApplyStage`` updates it in place with adRAP, and
    this class reconciles the stored tree with its folder after any crash or downtime.
    """

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
        state = self.open_state(recover=True)
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
            self.store.upsert(state.payloads(batch), self.vectors_of(state, batch))
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
