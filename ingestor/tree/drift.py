"""Drift per subtree: how far each part of an updated tree has moved from what it was built as.

adRAP places new leaves through the global UMAP + GMM of layer 0 fitted at the last build (or the
last repair of that part): its global clusters ("groups") decide which leaves are ever clustered
together. Each group with the summaries over it is a subtree of the tree, and the unit of a partial
repair (:mod:`ingestor.tree.repair`). Its drift is the share of its leaves placed or removed since
its global model was fitted::

    drift(g) = (leaves added to g + leaves removed from g since the fit) / max(tau_c, size at fit)

counted at every commit by :class:`~ingestor.tree.adrap.TreeUpdater` (a cost of the batch, never
of the tree) and kept in the state (``TreeState.params["drift"]``, written with every commit), so
``adrap status``, ``/status`` and ``/metrics`` read it without touching a row. A group refitted by
adRAP's local upkeep keeps its count: its global placement is what drifts. A full rebuild starts
every count again (the record names the build it belongs to, ``built_at``).

The record also holds the repair ledger: the summary tokens each repair spent, when (the budget
per hour, :class:`~ingestor.tree.repair.RepairBudget`), and how many repairs ran.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingestor.tree.rowmap import loads
from ingestor.tree.state import NODES_NS, TreeState

if TYPE_CHECKING:  # adrap status reads the record without sklearn (cluster imports it)
    from ingestor.cluster.adaptive import AdaptiveLayer
    from models_store import RowStore

__all__ = [
    "DRIFT_PARAM",
    "GroupDrift",
    "drift_record",
    "drift_summary",
    "group_drifts",
    "note_changes",
    "reset_groups",
    "summary_drift",
]

#: The key of ``TreeState.params`` holding the drift record.
DRIFT_PARAM = "drift"
#: Groups listed by :func:`drift_summary` (the most drifted first).
LISTED = 5


@dataclass(frozen=True)
class GroupDrift:
    """One layer-0 group (a subtree): its leaves now, at its fit, and those changed since."""

    group: int
    size: int
    base: int
    changed: int
    value: float


def _sizes(al: AdaptiveLayer) -> list[int]:
    out = []
    for g in range(len(al.gmms)):
        gmm = al.gmms[g]
        out.append(len(al.guarded[g][1]) if gmm is None else int(gmm.n))
    return out


def drift_record(state: TreeState, *, create: bool = True) -> dict[str, Any] | None:
    """The tree's drift record (made from layer 0's groups once per build when ``create``;
    None: a tree without layers, or no record and ``create`` is False)."""
    rec = state.params.get(DRIFT_PARAM)
    if isinstance(rec, dict) and rec.get("built_at") == state.built_at:
        return rec
    if not create or not state.layers:
        return None
    sizes = _sizes(state.layers[0])
    ledger = rec.get("ledger", []) if isinstance(rec, dict) else []  # a rebuild keeps the ledger
    rec = {
        "built_at": state.built_at,
        "floor": state.layers[0].tau_c,
        "size": sizes,
        "base": list(sizes),
        "changed": [0] * len(sizes),
        "repairs": 0,
        "repair_tokens": 0,
        "ledger": ledger,
    }
    state.params[DRIFT_PARAM] = rec
    return rec


def _grow(rec: dict[str, Any], n: int) -> None:
    for key in ("size", "base", "changed"):
        rec[key].extend([0] * (n - len(rec[key])))


def note_changes(state: TreeState, added: Counter[int], removed: Counter[int]) -> None:
    """Count a batch's leaves added to and removed from each layer-0 group; the sizes of those
    groups (and of groups a cut made) are read again from the layer (loaded by the batch)."""
    if not added and not removed:
        return
    rec = drift_record(state)
    if rec is None:
        return
    al = state.layers[0]
    before = len(rec["size"])
    _grow(rec, len(al.gmms))
    waits = rec.get("waits", {})  # a region that waited for the budget is estimated again
    for g, n in (added + removed).items():
        rec["changed"][g] += n
        waits.pop(str(g), None)
    for g in {*added, *removed, *range(before, len(al.gmms))}:
        gmm = al.gmms[g]
        rec["size"][g] = len(al.guarded[g][1]) if gmm is None else int(gmm.n)


def reset_groups(state: TreeState, groups: list[int]) -> None:
    """Groups just fitted afresh (a repair): their sizes read again, their counts at 0."""
    rec = drift_record(state)
    if rec is None:
        return
    al = state.layers[0]
    _grow(rec, len(al.gmms))
    for g in groups:
        gmm = al.gmms[g]
        size = len(al.guarded[g][1]) if gmm is None else int(gmm.n)
        rec["size"][g] = rec["base"][g] = size
        rec["changed"][g] = 0


def group_drifts(state: TreeState) -> list[GroupDrift]:
    """Every layer-0 group's drift (from the record: no row is read), most drifted first."""
    rec = drift_record(state, create=False)
    if rec is None:
        return []
    floor = int(rec.get("floor", 1))
    out = [
        GroupDrift(g, size, base, changed, changed / max(floor, base, 1))
        for g, (size, base, changed) in enumerate(
            zip(rec["size"], rec["base"], rec["changed"], strict=True)
        )
        if size or changed
    ]
    return sorted(out, key=lambda d: (-d.value, d.group))


def drift_summary(state: TreeState | None, threshold: float) -> dict[str, Any]:
    """The drift block of ``adrap status`` and ``/status``: groups (subtrees), the largest and
    the leaf-weighted mean drift, how many with leaves are past ``threshold`` (due for a repair:
    the ones :func:`ingestor.tree.repair.plan` takes), the most
    drifted few, and the repairs made and their tokens."""
    drifts = group_drifts(state) if state is not None else []
    rec = (drift_record(state, create=False) if state is not None else None) or {}
    leaves = sum(d.size for d in drifts)
    return {
        "subtrees": len(drifts),
        "max": round(drifts[0].value, 3) if drifts else 0.0,
        "mean": round(sum(d.value * d.size for d in drifts) / max(1, leaves), 3),
        # a subtree whose leaves were all removed has nothing to re-cluster (repair.plan)
        "due": sum(d.value > threshold and d.size > 0 for d in drifts),
        "threshold": threshold,
        "most": [
            {"group": d.group, "leaves": d.size, "changed": d.changed, "drift": round(d.value, 3)}
            for d in drifts[:LISTED]
        ],
        "repairs": int(rec.get("repairs", 0)),
        "repair_tokens": int(rec.get("repair_tokens", 0)),
    }


def summary_drift(rows: RowStore | None, node_id: str) -> float | None:
    """One summary's drift as committed: the tokens its children gained, lost or had rewritten
    since its text was written (:attr:`~ingestor.tree.state.Node.drift`; ``inf``: it may hold a
    removed node's text until it is regenerated), read from its row of the state database (one
    row, never the tree). None: no state, or no such node."""
    data = rows.get(NODES_NS, node_id) if rows is not None else None
    if data is None:
        return None
    return float(getattr(loads(data), "drift", 0.0))
