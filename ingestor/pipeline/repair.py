"""Run the partial repairs a tree has due (:mod:`ingestor.tree.repair`), each stored as one update.

Each region repaired is one journalled commit (``TreeContext.store_changes``: the intent, the
points upserted, the state committed, the gone points deleted): a kill before the commit leaves
the old subtree (the next writer rewrites the points the intent names from the committed state),
a kill after it the new one. Readers are never blocked: they read the store and the committed
state, as during any update. Summaries paid before a kill stay in the state's summary cache only
when committed; the daemon carries them over a failed try as it does for a refresh.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ingestor.pipeline.context import TreeContext
from ingestor.tree import changelog
from ingestor.tree.repair import RepairBudget, Repaired, RepairParams, plan, repair_region
from ingestor.tree.state import TreeState

__all__ = ["RepairRun", "run_repairs"]

log = logging.getLogger(__name__)


@dataclass
class RepairRun:
    """What one pass did: the repairs made, those left waiting for the budget, the tokens."""

    done: list[Repaired] = field(default_factory=list)
    waiting: int = 0
    due: int = 0

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.done)

    def summary(self) -> str:
        if not self.due:
            return "no subtree has drifted past the repair threshold"
        leaves = sum(r.leaves for r in self.done)
        regen = sum(r.stats.summaries_regenerated for r in self.done)
        return (
            f"{len(self.done)} of {self.due} drifted subtrees repaired ({leaves} leaves "
            f"re-clustered, {regen} summaries regenerated, {self.tokens} tokens)"
            + (f"; {self.waiting} wait for the token budget" if self.waiting else "")
        )


def run_repairs(
    context: TreeContext,
    state: TreeState,
    params: RepairParams,
    *,
    now: float | None = None,
    limit: int | None = None,
) -> RepairRun:
    """Repair the due regions of ``state`` (at most ``limit``), most drifted first, while the
    budget allows; each one committed as it is done."""
    out = RepairRun()
    if params.tokens_per_hour <= 0:
        return out
    regions = plan(state, params)
    out.due = len(regions)
    budget = RepairBudget(state, params.tokens_per_hour)
    for region in regions[:limit]:
        started = time.time()
        done = repair_region(state, context.builder, region, budget, now=now)
        if done is None:
            out.waiting += 1
            continue
        changelog.note(state, "repair", started_at=started, stats=done.stats)
        context.store_changes(state, done.stats.upserted, done.stats.deleted)
        out.done.append(done)
        log.info(
            "repaired global clusters %s (%d leaves): %d summaries regenerated, %d kept, %d tokens",
            region,
            done.leaves,
            done.stats.summaries_regenerated,
            done.stats.summary_cache_hits + done.stats.summaries_tolerated,
            done.tokens,
        )
    out.waiting += max(0, len(regions) - len(regions[:limit]))
    return out
