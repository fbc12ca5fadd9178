"""A model change's record in the state database, and what ``status`` shows of it.

:mod:`ingestor.tree.model_change` keeps its plan and cursor in the namespace :data:`NS` of the
state database; this module reads them without the clustering libraries, so ``adrap status``,
``/status``, ``/metrics`` and the dashboard show a change under way
(:func:`change_in`: from-model -> to-model, phase, nodes embedded so far of the total, when it
started) while the writer keeps going.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestor.tree.rowmap import loads
from models_store import ModelStoreError, RowStore

__all__ = [
    "COPY",
    "NS",
    "PHASES",
    "REFIT",
    "SWITCH",
    "ChangePlan",
    "ChangeProgress",
    "change_in",
    "change_line",
    "pending_change",
    "read_plan",
    "stored_model",
]

#: The namespace of a change's rows in the state database: ``plan``, ``cursor`` and ``done``.
NS = "model_change"
#: The phases, in order: every node embedded again beside the live store; the new store indexed
#: and the layers' models refitted; the state committed and the store switched.
COPY = "copy"
REFIT = "refit"
SWITCH = "switch"
PHASES = (COPY, REFIT, SWITCH)


@dataclass(frozen=True)
class ChangePlan:
    """A model change under way: from ``old`` to ``model`` (``dim``-d), in ``phase``."""

    old: str
    model: str
    dim: int
    phase: str
    total: int
    started_at: float


@dataclass(frozen=True)
class ChangeProgress:
    """A change under way as ``status`` shows it: ``done`` of ``plan.total`` nodes embedded."""

    plan: ChangePlan
    done: int

    def to_json(self) -> dict[str, Any]:
        """The ``model_change`` block of ``/status`` and ``adrap status --json``."""
        p = self.plan
        return {
            "from": p.old,
            "to": p.model,
            "phase": p.phase,
            "nodes_done": self.done,
            "nodes_total": p.total,
            "started_at": p.started_at,
        }


def change_line(doc: dict[str, Any]) -> str:
    """A ``model_change`` block (:meth:`ChangeProgress.to_json`) in one line for a person:
    ``a -> b: copy, 10 of 90 nodes embedded, started 2026-01-31T12:00:00Z``."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(doc["started_at"]))
    line = (
        f"{doc['from']} -> {doc['to']}: {doc['phase']}, {doc['nodes_done']} of "
        f"{doc['nodes_total']} nodes embedded, started {started}"
    )
    if "running" not in doc:
        return line
    if doc["running"] is None:
        return f"{line}; stopped: the next `adrap watch` or writing command resumes it"
    return f"{line}; run by {doc['running']}"


def read_plan(rows: RowStore) -> ChangePlan | None:
    """Return the change under way recorded in a state database, or None."""
    raw = rows.get(NS, "plan")
    return None if raw is None else ChangePlan(**loads(raw))  # type: ignore[arg-type]


def pending_change(rows: RowStore) -> tuple[ChangePlan, int] | None:
    """Return the change under way in a state database and the nodes written so far (the
    committed cursor's count), or None."""
    plan = read_plan(rows)
    if plan is None:
        return None
    done = rows.get(NS, "done")
    return plan, int(loads(done)) if done is not None else 0  # type: ignore[call-overload]


def change_in(path: Path) -> ChangeProgress | None:
    """Return the change under way in the state database ``path`` as committed (None: none, or
    no database yet). Opens it read-only: creates nothing; two row reads."""
    if not path.exists():
        return None
    try:
        found = pending_change(RowStore.shared(path, readonly=True))
    except (ModelStoreError, sqlite3.OperationalError):  # a database being created: none in it
        return None
    return None if found is None else ChangeProgress(*found)


def stored_model(path: Path) -> tuple[str, int] | None:
    """Return the embedding model and dimension the committed state in the database ``path``
    names (what its live store holds, or will once a committed switch is finished), or None when
    there is none. Opens it read-only: creates nothing."""
    if not path.exists():
        return None
    rows = RowStore.shared(path, readonly=True)
    m = rows.manifest()
    if "tree_name" not in m:
        return None
    return str(m.get("embed_model")), int(m.get("dim") or 0)
