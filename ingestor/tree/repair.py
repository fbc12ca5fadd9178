"""Partial repair: re-cluster a drifted subtree's leaves as a build would, within a token budget.

A subtree whose drift (:mod:`ingestor.tree.drift`) passed the threshold is repaired alone: its
layer-0 group and the nearest groups (in the global UMAP space, together at most ``max_leaves``
leaves: the *region*) are clustered afresh with the build's two steps
(:func:`~ingestor.cluster.region_refit.refit_region`); clusters that come out with the same
members keep their ids and summaries, the others are regenerated through the summary cache, with
what that moves above (:meth:`~ingestor.tree.adrap.TreeUpdater.regenerate`, adRAP's own path).
Everything happens on the in-memory state: the caller commits it as one update (the journalled
commit: a kill before the commit leaves the old subtree, after it the new one).

The budget: a repair is installed only when its estimate fits in what is left of the hour's
``tokens_per_hour`` (spent over the last hour, from the ledger kept in the state, so a restart
does not refill it). The region is fitted first, the layer untouched, so the estimate counts only
the clusters that change: one call for each of their layer-1 summaries and for each summary above
them, each as :class:`~ingestor.tree.summary_calls.CallCost` estimates it (what the call is
charged: an LLM's prompt with a tokenizer margin and its template, plus the longest summary it
may write; the children's tokens alone for a summariser that reports no usage). A repair that
spent more than its estimate (logged) is charged what it spent. Charged: the tokens the
summariser reports (prompt + completion), or the children's tokens of the summaries paid when it
reports none.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ingestor.cluster.layer_state import LayerDelta
from ingestor.cluster.region_refit import RegionFit, fit_region, install_region, neighbours
from ingestor.tree.adrap import TreeUpdater, UpdateStats
from ingestor.tree.build import TreeBuilder
from ingestor.tree.drift import drift_record, group_drifts, reset_groups
from ingestor.tree.state import TreeState
from ingestor.tree.summary_calls import CallCost

__all__ = ["HOUR", "RepairBudget", "RepairParams", "Repaired", "charged", "plan", "repair_region"]

log = logging.getLogger(__name__)

HOUR = 3600.0


@dataclass(frozen=True)
class RepairParams:
    """``ADRAP_ADRAP__REPAIR_*``: a subtree past ``threshold`` drift is repaired, its region at
    most ``max_leaves`` leaves, within ``tokens_per_hour`` summary tokens (0: no repair)."""

    threshold: float = 0.5
    tokens_per_hour: int = 50_000
    max_leaves: int = 2000


@dataclass
class Repaired:
    """One repair: the groups re-clustered (before and after), its leaves, estimate and cost."""

    groups: list[int]
    now_groups: list[int]
    leaves: int
    estimate: int
    stats: UpdateStats = field(default_factory=UpdateStats)

    @property
    def tokens(self) -> int:
        return charged(self.stats)


def charged(stats: UpdateStats) -> int:
    """The tokens a repair is charged: the summariser's (prompt + completion) when it reports
    them, else the children's tokens of the summaries paid."""
    return max(stats.summary_tokens, stats.summary_input_tokens)


class RepairBudget:
    """The hour's repair tokens, read from and written to the state's drift record."""

    def __init__(self, state: TreeState, per_hour: int) -> None:
        self.state, self.per_hour = state, per_hour

    def _ledger(self) -> list[list[float]]:
        rec = drift_record(self.state)
        return [] if rec is None else rec["ledger"]

    def spent(self, now: float) -> int:
        """Tokens charged to repairs in the hour up to ``now`` (wall-clock seconds)."""
        return int(sum(t for at, t in self._ledger() if at > now - HOUR))

    def left(self, now: float) -> int:
        return max(0, self.per_hour - self.spent(now))

    def charge(self, tokens: int, now: float) -> None:
        """Record a repair's cost (entries older than an hour are dropped)."""
        rec = drift_record(self.state)
        if rec is None:
            return
        rec["ledger"] = [e for e in rec["ledger"] if e[0] > now - HOUR] + [[now, tokens]]
        rec["repairs"] += 1
        rec["repair_tokens"] += tokens

    def status(self, now: float) -> dict[str, Any]:
        return {"repair_tokens_last_hour": self.spent(now), "repair_tokens_per_hour": self.per_hour}


def _region_of(state: TreeState, g: int, params: RepairParams) -> list[int]:
    al = state.layers[0]
    rec = drift_record(state)
    sizes = list(rec["size"]) if rec is not None else []
    sizes += [0] * (len(al.gmms) - len(sizes))
    return neighbours(al, g, max(params.max_leaves, sizes[g]), sizes)


def plan(state: TreeState, params: RepairParams) -> list[list[int]]:
    """The regions due for a repair, most drifted subtree first; regions do not overlap."""
    if not state.layers or getattr(state.layers[0].clusterer, "global_umap_", None) is None:
        return []
    out: list[list[int]] = []
    taken: set[int] = set()
    for d in group_drifts(state):
        if d.value <= params.threshold:
            break
        if d.group in taken or d.size == 0:
            continue
        region = [g for g in _region_of(state, d.group, params) if g not in taken]
        taken.update(region)
        out.append(region)
    return out


def estimate(state: TreeState, fit: RegionFit, cost: CallCost, longest: int) -> int:
    """A region fit's token estimate: a call for each layer-1 summary it changes (over its
    members) and for each ancestor of the summaries it changes or drops (over its children),
    each ancestor counted once, each call as ``cost`` charges it. A child that is written again
    first counts as the longer of its text now and ``longest`` (the most a summary holds): an
    ancestor's prompt reads the new text, which can be longer than the old one."""
    changed = fit.changed()
    state.nodes.prefetch({n for m in changed for n in m})
    tokens = {
        n: node.n_tokens for m in changed for n in m if (node := state.nodes.peek(n)) is not None
    }
    first = sum(cost(sum(tokens.get(n, 0) for n in m)) for m in changed)
    kept = {i for i, m in zip(fit.ids, fit.flat, strict=True) if i >= 0 and fit.old[i] == m}
    al = state.layers[0]
    olds = [n for cid in fit.old if cid not in kept for n in al.cluster_nodes.get(cid, [])]
    return first + _ancestors(state, olds, cost, longest)


def _ancestors(state: TreeState, starts: list[str], cost: CallCost, longest: int) -> int:
    """The calls of the ancestors of ``starts`` (each over its children, those written again
    counted at ``longest`` tokens or more), each counted once."""
    rewritten = set(starts)
    seen: set[str] = set()
    todo, total = list(starts), 0
    while todo:
        state.nodes.prefetch(todo)
        node = state.nodes.peek(todo.pop())
        for p in node.parents if node is not None else []:
            parent = state.nodes.peek(p)
            if p in seen or parent is None:
                continue
            seen.add(p)
            state.nodes.prefetch(parent.children)
            kids = [
                max(k.n_tokens, longest) if c in rewritten or c in seen else k.n_tokens
                for c in parent.children
                if (k := state.nodes.peek(c)) is not None
            ]
            total += cost(sum(kids))
            todo.append(p)
    return total


def repair_region(
    state: TreeState,
    builder: TreeBuilder,
    region: list[int],
    budget: RepairBudget,
    *,
    now: float | None = None,
) -> Repaired | None:
    """Repair one region when its estimate fits the budget (None: it does not; nothing
    changed). The state is changed in memory only: the caller commits it.

    The region is fitted first, the layer left as it is, to know which clusters change: only
    their summaries are paid. A region that did not fit is not fitted again until the budget
    left reaches what it needed then (``waits`` in the drift record).
    """
    now = time.time() if now is None else now
    rec = drift_record(state)
    waits: dict[str, int] = rec.setdefault("waits", {}) if rec is not None else {}
    key = str(region[0])
    left = budget.left(now)
    if left <= 0 or left < waits.get(key, 0):
        return None
    al = state.layers[0]
    fit = fit_region(al, region, state.matrix)
    summaries = builder.summaries
    longest = summaries.params.summary_max_tokens
    cost = estimate(state, fit, CallCost.of(summaries.summarizer, longest), longest)
    if cost > left:
        waits[key] = cost
        log.info(
            "repair of global clusters %s (%d leaves) waits: estimated %d tokens, %d left of "
            "ADRAP_ADRAP__REPAIR_TOKENS_PER_HOUR %d",
            region,
            len(fit.nodes),
            cost,
            left,
            budget.per_hour,
        )
        return None
    waits.pop(key, None)
    delta = LayerDelta()
    now_groups = install_region(al, fit, delta)
    reset_groups(state, sorted(set(region) | set(now_groups)))
    stats = TreeUpdater(builder).regenerate(state, {0: delta})
    done = Repaired(list(region), now_groups, len(fit.nodes), cost, stats)
    if done.tokens > cost:
        log.warning(
            "repair of global clusters %s spent %d tokens, past its estimate %d",
            region,
            done.tokens,
            cost,
        )
    budget.charge(done.tokens, now)
    return done
