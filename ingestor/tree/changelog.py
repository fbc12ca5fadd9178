"""What each build, update, rebuild or refresh changed: the folder's change log, in the tree's state.

Every commit that changes the tree writes one :class:`ChangeRecord` in the same transaction as the
state it describes (``ingestor.tree.persist.commit_state``): a crash never keeps a record of an
update that did not land, nor loses one that did. A record names the files added, edited, removed
or given new permissions, each with its access class and owner, so that a reader is shown only
the files they may read; the leaves added and removed; and the summaries regenerated (id, layer,
access classes), the ones a "what changed" digest reads.

Records are keyed by their time in milliseconds (then the state's generation), so "since Monday"
is one index range scan of the records asked for, whatever the log holds; the log is kept within
a number of records and days (``ADRAP_CHANGES__KEEP_RECORDS``, ``ADRAP_CHANGES__KEEP_DAYS``) by
:func:`prune`, itself two index range deletes.
"""

from __future__ import annotations

import json
import os
import pwd
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from ingestor.config import ChangesSettings, default_of
from retriever import F

if TYPE_CHECKING:
    from models_store import Changes, RowStore

#: The state database's namespace of change records.
NS: Final = "changes"
#: Files a record lists (a first build of a big share: the rest are counted, ``files_omitted``).
MAX_FILES: Final = 1000
#: Summaries a record lists (highest layers first; the rest are counted).
MAX_SUMMARIES: Final = 500

Action = Literal["added", "edited", "removed", "moved", "permissions"]
Kind = Literal[
    "build", "update", "rebuild", "refresh", "repair", "permissions", "model", "relocated"
]


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file of a record: what happened to it, its access class then, and its owner; a file
    moved or renamed (its text unchanged) also names where it was and its access class there."""

    source: str
    action: Action
    access: str = ""
    owner: str | None = None
    moved_from: str | None = None
    from_access: str = ""


@dataclass(frozen=True, slots=True)
class SummaryChange:
    """One summary a record regenerated: its id, layer and access classes."""

    node_id: str
    layer: int
    access: tuple[str, ...] = ()


#: A record's fields other than its lists.
_SCALARS: Final = (
    "at",
    "kind",
    "files_omitted",
    "summaries_omitted",
    "leaves_added",
    "leaves_removed",
    "summaries_deferred",
    "summaries_tolerated",
    "summary_tokens",
    "detail",
    "key",
    "first_at",
    "updates",
)

#: An update that only edits the files that the log's newest record, an update, only edited,
#: within this many seconds of it, is merged into it: a document autosaved or a log appended to
#: makes one record, not one a save (80 in 40 s for a file written twice a second), which drowned
#: ``adrap changes`` and pushed the rest of the history out of ``ADRAP_CHANGES__KEEP_RECORDS``.
MERGE_SECONDS: Final = 600.0
#: ... as long as the merged record spans at most this many seconds from its first update (a
#: document autosaved all day makes a record an hour: "since 14:00" stays about the afternoon).
MERGE_SPAN_SECONDS: Final = 3600.0


@dataclass
class ChangeRecord:
    """What one commit changed (see the module docstring).

    Attributes:
        at: when the update started (seconds since the epoch).
        kind: build, update, rebuild (drift), refresh (stale summaries), permissions, or model
            (the tree's embedding model changed: :mod:`ingestor.tree.model_change`).
        files, files_omitted: the files it changed (at most :data:`MAX_FILES`) and the others.
        summaries, summaries_omitted: the summaries it regenerated, likewise.
        leaves_added, leaves_removed, summaries_deferred, summaries_tolerated, summary_tokens:
            its counts (a reader who may not read every file gets none of them).
        detail: what a record without files says (a model change: from which model to which;
            it names no file, so every reader sees it).
        key: its key in the log, once written or read.
        first_at, updates: a record of updates merged (:data:`MERGE_SECONDS`): when the first
            started (``at`` is the last's) and how many; 0 and 1 otherwise.
    """

    at: float
    kind: Kind
    files: list[FileChange] = field(default_factory=list)
    files_omitted: int = 0
    summaries: list[SummaryChange] = field(default_factory=list)
    summaries_omitted: int = 0
    leaves_added: int = 0
    leaves_removed: int = 0
    summaries_deferred: int = 0
    summaries_tolerated: int = 0
    summary_tokens: int = 0
    detail: str = ""
    key: str = ""
    first_at: float = 0.0
    updates: int = 1

    def to_json(self) -> dict[str, Any]:
        """Return the record as JSON data (written field by field: ``asdict`` copies deeply,
        and a reader decodes and encodes up to a thousand records per request)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in _SCALARS}
        if self.updates == 1:  # not merged: as records were before merging
            del out["first_at"], out["updates"]
        out["files"] = [
            {"source": f.source, "action": f.action, "access": f.access}
            | ({"owner": f.owner} if f.owner is not None else {})
            | ({"from": f.moved_from, "from_access": f.from_access} if f.moved_from else {})
            for f in self.files
        ]
        out["summaries"] = [
            {"node_id": s.node_id, "layer": s.layer, "access": list(s.access)}
            for s in self.summaries
        ]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChangeRecord:
        record = cls(**{k: data[k] for k in _SCALARS if k in data})
        record.files = [
            FileChange(
                f["source"],
                f["action"],
                f.get("access", ""),
                f.get("owner"),
                f.get("from"),
                f.get("from_access", ""),
            )
            for f in data.get("files", ())
        ]
        record.summaries = [
            SummaryChange(s[F.NODE_ID], s[F.LAYER], tuple(s.get("access", ())))
            for s in data.get("summaries", ())
        ]
        return record


def seen_by(record: dict[str, Any], readable: frozenset[str] | None) -> dict[str, Any] | None:
    """Return a record's JSON as a reader of the access classes ``readable`` may see it (None:
    every class: the record itself): only the files of a readable class, the summaries whose
    every class is readable and the detail (it names no file), no counts; None when nothing is
    left. A file moved between classes is told as that reader saw it (:func:`_file_seen_by`)."""
    if readable is None:
        return record
    files = [
        seen for f in record.get("files", ()) if (seen := _file_seen_by(f, readable)) is not None
    ]
    summaries = [
        s
        for s in record.get("summaries", ())
        if s.get("access") and readable.issuperset(s["access"])
    ]
    detail = record.get("detail", "")  # names no file (ChangeRecord.detail)
    if not files and not summaries and not detail:
        return None
    out = {"at": record["at"], "kind": record["kind"], "files": files, "summaries": summaries}
    merged = {k: record[k] for k in ("first_at", "updates") if record.get("updates", 1) > 1}
    return out | merged | ({"detail": detail} if detail else {})


def _file_seen_by(f: dict[str, Any], readable: frozenset[str]) -> dict[str, Any] | None:
    """One file of a record as a reader of ``readable`` saw it, None if not at all. A file moved
    out of a class they may not read *appeared* to them (added, its old name not shown: a name
    can tell what a folder holds), one moved out of their sight was removed (under its old
    name); a move they see both ends of stays a move."""
    if f.get("action") != "moved":
        return f if f.get("access") in readable else None
    now, was = f.get("access") in readable, f.get("from_access") in readable
    if now and was:
        return f
    if now:
        return {k: v for k, v in f.items() if k not in ("from", "from_access")} | {
            "action": "added"
        }
    if was:
        return {"source": f["from"], "action": "removed", "access": f["from_access"]}
    return None


def owner_of(root: str, source: str) -> str | None:
    """Return the name of the account owning ``root/source`` (its number where it has no name;
    None where it cannot be read now)."""
    try:
        uid = os.stat(Path(root) / source, follow_symlinks=False).st_uid
    except (OSError, ValueError):
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def capped_files(files: Iterable[FileChange]) -> tuple[list[FileChange], int]:
    """Return the first :data:`MAX_FILES` of ``files`` and how many more there were."""
    listed = list(files)
    return listed[:MAX_FILES], max(0, len(listed) - MAX_FILES)


def capped_summaries(summaries: Iterable[SummaryChange]) -> tuple[list[SummaryChange], int]:
    """Return the :data:`MAX_SUMMARIES` highest-layer summaries and how many more there were."""
    listed = sorted(summaries, key=lambda s: (-s.layer, s.node_id))
    return listed[:MAX_SUMMARIES], max(0, len(listed) - MAX_SUMMARIES)


def record_key(at: float, generation: int, index: int = 0) -> str:
    """Return the key of a record: its time in ms, the state's generation, its place in it."""
    return f"{int(at * 1000):015d}.{generation:012d}.{index}"


def time_key(at: float) -> str:
    """Return the smallest key of a record made at ``at`` or later."""
    return f"{int(at * 1000):015d}"


def gather(
    records: list[ChangeRecord], generation: int, ch: Changes, rows: RowStore | None = None
) -> None:
    """Add ``records`` to the commit ``ch`` of state generation ``generation``; given the log's
    ``rows``, an update that edits again what the newest record edited is merged into it
    (:data:`MERGE_SECONDS`): that record is replaced in the same commit."""
    newest = rows.items_range(NS, limit=1, descending=True) if rows is not None and records else []
    before = (newest[0][0], ChangeRecord.from_json(json.loads(newest[0][1]))) if newest else None
    for i, record in enumerate(records):
        if before is not None and _mergeable(before[1], record):
            ch.remove(NS, before[0])
            _merge(before[1], record)
        record.key = record_key(record.at, generation, i)
        body = {k: v for k, v in record.to_json().items() if k != "key"}
        ch.set(NS, record.key, json.dumps(body, ensure_ascii=False).encode())
        before = (record.key, record)


def _mergeable(before: ChangeRecord, record: ChangeRecord) -> bool:
    """Whether ``record`` edits exactly what the update ``before`` edited, and nothing else,
    within :data:`MERGE_SECONDS` of it and :data:`MERGE_SPAN_SECONDS` of its first."""
    if record.kind != "update" or before.kind != "update" or record.detail or before.detail:
        return False
    if record.files_omitted or before.files_omitted:
        return False
    edited = set(record.files)
    if not edited or any(f.action != "edited" for f in edited) or len(edited) != len(record.files):
        return False
    return (
        edited == set(before.files)
        and 0 <= record.at - before.at <= MERGE_SECONDS
        and record.at - (before.first_at or before.at) <= MERGE_SPAN_SECONDS
    )


def _merge(before: ChangeRecord, record: ChangeRecord) -> None:
    """Make ``record`` the record of ``before``'s updates and its own."""
    record.first_at = before.first_at or before.at
    record.updates += before.updates
    record.leaves_added += before.leaves_added
    record.leaves_removed += before.leaves_removed
    record.summaries_deferred += before.summaries_deferred
    record.summaries_tolerated += before.summaries_tolerated
    record.summary_tokens += before.summary_tokens
    summaries = {s.node_id: s for s in before.summaries} | {s.node_id: s for s in record.summaries}
    record.summaries, omitted = capped_summaries(summaries.values())
    record.summaries_omitted += before.summaries_omitted + omitted


def read(
    rows: RowStore,
    *,
    since: float | None = None,
    until: float | None = None,
    limit: int = 100,
    readable: frozenset[str] | None = None,
) -> list[dict[str, Any]]:
    """Return the records made in ``[since, until)`` as JSON data (:meth:`ChangeRecord.to_json`
    with its ``key``), newest first, at most ``limit`` of those ``readable`` may see
    (:func:`seen_by`). Records are read as JSON and given as JSON: a request of a thousand
    records decodes each once and builds no objects.

    A reader who sees few records of a long log makes this read the log in pages of
    ``4 * limit`` until ``limit`` are found or the range is spent.
    """
    start = time_key(since) if since is not None else ""
    end = time_key(until) if until is not None else None
    out: list[dict[str, Any]] = []
    page = max(16, 4 * limit) if readable is not None else limit
    while len(out) < limit:
        got = rows.items_range(NS, start, end, limit=page, descending=True)
        for key, value in got:
            seen = seen_by(json.loads(value), readable)
            if seen is not None:
                seen["key"] = key
                out.append(seen)
                if len(out) == limit:
                    break
        if len(got) < page:
            break
        end = got[-1][0]  # the next page: older than the last key read
    return out


@dataclass(frozen=True, slots=True)
class Retention:
    """How much of the log is kept (``ADRAP_CHANGES__*``): records, and days (0: no limit)."""

    keep_records: int = default_of(ChangesSettings, "keep_records")
    keep_days: float = default_of(ChangesSettings, "keep_days")


def prune(rows: RowStore, retention: Retention, *, now: float | None = None) -> int:
    """Delete records older than ``retention.keep_days`` and all but the newest
    ``retention.keep_records``; return how many were deleted. Each bound is one index range,
    and nothing is written while the oldest record is young enough and the log is known to be
    within its count (the usual commit pays two index lookups)."""
    gone = 0
    if retention.keep_days > 0:
        cutoff = time_key((time.time() if now is None else now) - retention.keep_days * 86400.0)
        oldest = rows.items_range(NS, limit=1)
        if oldest and oldest[0][0] < cutoff:
            gone = rows.delete_below(NS, cutoff)
    return gone + rows.evict_oldest(NS, retention.keep_records)


class _Journaled(Protocol):
    """What :func:`note` reads and writes of a tree's state (``TreeState``)."""

    @property
    def nodes(self) -> Any: ...  # peek(node_id) -> Node | None

    @property
    def journal(self) -> list[ChangeRecord]: ...


class _Counts(Protocol):
    """The counts of an update :func:`note` keeps (``UpdateStats``)."""

    leaves_added: int
    leaves_removed: int
    summaries_deferred: int
    summaries_tolerated: int
    summary_tokens: int
    upserted: set[str]


def note(
    state: _Journaled,
    kind: Kind,
    *,
    started_at: float,
    files: Iterable[FileChange] = (),
    stats: _Counts | None = None,
    summaries: Iterable[str] = (),
    detail: str = "",
) -> ChangeRecord:
    """Add the record of a change to ``state``'s journal (written by its next commit).

    The summaries it names are those of ``summaries`` and ``stats.upserted`` written since
    ``started_at`` and not stale: regenerated, or kept with new members (tolerated).
    """
    moved = []
    for node_id in set(summaries) | (stats.upserted if stats is not None else set()):
        node = state.nodes.peek(node_id)
        if node is None or node.layer == 0 or node.stale or node.updated_at < started_at:
            continue
        moved.append(SummaryChange(node_id, node.layer, tuple(sorted(node.access))))
    listed, files_omitted = capped_files(files)
    kept, summaries_omitted = capped_summaries(moved)
    record = ChangeRecord(
        at=started_at,
        kind=kind,
        files=listed,
        files_omitted=files_omitted,
        summaries=kept,
        summaries_omitted=summaries_omitted,
        detail=detail,
    )
    if stats is not None:
        record.leaves_added, record.leaves_removed = stats.leaves_added, stats.leaves_removed
        record.summaries_deferred = stats.summaries_deferred
        record.summaries_tolerated = stats.summaries_tolerated
        record.summary_tokens = stats.summary_tokens
    state.journal.append(record)
    return record
