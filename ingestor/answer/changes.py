"""What changed in the folder, as a caller may see it: ``adrap changes``, ``GET /changes`` and the
MCP tool ``changes`` read the tree's change log (:mod:`ingestor.tree.changelog`) through
:class:`ChangeFeed`.

A caller who may read every file (the tree's owner) sees every record whole; anyone else sees
only the files of the access classes they may read and the summaries every one of whose classes
they may read, without counts (they would tell of the files hidden), and no record where nothing
is left. The digest ("what changed, in a few paragraphs") is read from the summaries the records
name, highest layer first, as they are now in the store and as the caller may read them, within
a token budget, each numbered for citation; with an LLM configured, ``digest=llm`` writes an
answer from them citing those numbers (the answer path of ``adrap ask``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ingestor.answer.ask import citations_in, fit_prompt, qa_messages
from ingestor.answer.params import bounded_param
from ingestor.answer.provenance import ContextPart, SpanResolver, merge_spans
from ingestor.read.access_classes import UNRESTRICTED, ClassRegistry, Identity
from ingestor.tree import changelog
from retriever import F, NodePayload, NodeStore, SearchFilter
from retriever.budget import fill

if TYPE_CHECKING:
    from ingestor.answer.service import QueryService
    from ingestor.summarize.openai_compat import OpenAISummarizer
    from models_store import RowStore

#: Records a request may ask for.
MAX_LIMIT: Final = 1000
#: How far back a request without ``since`` looks.
DEFAULT_SINCE: Final = "7d"
#: Tokens of summaries a digest reads by default, and at most.
DIGEST_TOKENS: Final = 1500
MAX_DIGEST_TOKENS: Final = 16_000
#: Files whose leaves stand in for summaries in a digest, and leaves read per file.
LEAF_FILES: Final = 20
LEAF_SCROLL: Final = 64
#: Tokens of an LLM digest's answer.
DIGEST_ANSWER_TOKENS: Final = 400

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_time(value: str, now: float, what: str = "since") -> float:
    """Return the epoch seconds of ``value``: a duration back from ``now`` (``90m``, ``36h``,
    ``2d``, ``1w``), a day by its name (``today``, ``yesterday``, ``monday`` or ``mon``: the
    most recent one, today if it is that day; from its midnight, local time), an ISO date or
    date-time (``2026-11-23``, ``2026-11-23T09:00``; local time unless it names its zone), or
    epoch seconds.

    Raises:
        ValueError: none of those; the message shows the forms.
    """
    if m := _DURATION.match(value):
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    if (back := _days_back(value, now)) is not None:
        midnight = dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
        return (midnight - dt.timedelta(days=back)).timestamp()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"{what}={value!r} is not a time; give a duration back from now (90m, 36h, 2d, 1w), "
            "a day (today, yesterday, monday), an ISO date or date-time (2026-11-23, "
            "2026-11-23T09:00+01:00) or epoch seconds"
        ) from None
    return when.timestamp()


_WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _days_back(value: str, now: float) -> int | None:
    """Days from ``now``'s day back to the day ``value`` names (local time), or None."""
    word = value.strip().lower()
    if word in ("today", "yesterday"):
        return 0 if word == "today" else 1
    for i, day in enumerate(_WEEKDAYS):
        if len(word) >= 3 and day.startswith(word):
            return (dt.datetime.fromtimestamp(now).weekday() - i) % 7
    return None


def iso(at: float) -> str:
    """Return ``at`` as an ISO 8601 UTC time (seconds)."""
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="seconds")


def record_json(record: dict[str, Any]) -> dict[str, Any]:
    """Return a record as the answer lists it (its time in ISO too)."""
    return {"at_iso": iso(record["at"]), **record}


def state_rows(path: Path) -> Callable[[], RowStore | None]:
    """Return what opens the state database at ``path`` read-only when asked (None while there
    is none: nothing is created)."""

    def rows() -> RowStore | None:
        from models_store import RowStore

        return RowStore.shared(path, readonly=True) if path.exists() else None

    return rows


class ChangeFeed:
    """Reads the change log of one tree for callers, with its digest.

    Args:
        rows: returns the tree's state database (None: not built yet).
        tree: the tree's name.
        store: the node store the digest reads summaries from (None: no digest).
        classes: the tree's access classes (None: an empty registry: a restricted caller sees
            nothing).
        lock: held around every use of the store.
        llm: writes ``digest=llm`` (None: not configured).
        input_limit: the LLM's input limit in tokens: a digest's prompt keeps the parts that fit.
        answer_tokens: the longest answer the LLM may write (``ADRAP_ANSWER__MAX_TOKENS``, at
            most :data:`DIGEST_ANSWER_TOKENS`).
    """

    def __init__(
        self,
        rows: Callable[[], RowStore | None],
        tree: str,
        *,
        store: NodeStore | None = None,
        classes: ClassRegistry | None = None,
        lock: contextlib.AbstractContextManager[Any] | None = None,
        llm: OpenAISummarizer | None = None,
        input_limit: int | None = None,
        answer_tokens: int = DIGEST_ANSWER_TOKENS,
    ) -> None:
        self.rows = rows
        self.answer_tokens = min(answer_tokens, DIGEST_ANSWER_TOKENS)
        self.tree = tree
        self.store = store
        self.classes = classes if classes is not None else ClassRegistry(None)
        self.lock: contextlib.AbstractContextManager[Any] = lock or contextlib.nullcontext()
        self.llm = llm
        self.input_limit = input_limit

    @classmethod
    def over(cls, rows: Callable[[], RowStore | None], queries: QueryService) -> ChangeFeed:
        """Return the feed of ``queries``' tree, with its store, classes, lock and LLM."""
        return cls(
            rows,
            queries.tree,
            store=queries.store,
            classes=queries.classes,
            lock=queries.lock,
            llm=queries.llm,
            input_limit=queries.answer_input_limit,
            answer_tokens=queries.defaults.answer_tokens,
        )

    def changes(
        self, params: Mapping[str, object], caller: Identity = UNRESTRICTED
    ) -> dict[str, Any]:
        """Return the changes ``caller`` may see (parameters: ``since``, ``until``, ``limit``,
        ``digest``: ``1`` for the summaries, ``llm`` for an answer written from them,
        ``digest_tokens``).

        Raises:
            ValueError: a bad parameter (or ``digest=llm`` without an LLM configured).
        """
        now = time.time()
        since = parse_time(str(params.get("since") or DEFAULT_SINCE), now)
        until_raw = params.get("until")
        until = parse_time(str(until_raw), now, "until") if until_raw else None
        limit = bounded_param(params, "limit", 50, MAX_LIMIT)
        digest = str(params.get("digest") or "").lower()
        if digest not in ("", "0", "false", "1", "true", "llm"):
            raise ValueError(f"digest={digest!r} is not one of 1, llm")
        if digest == "llm" and self.llm is None:
            raise ValueError(
                "digest=llm needs an LLM (ADRAP_SUMMARY__BACKEND=openai); digest=1 reads the "
                "summaries that changed without one"
            )
        budget = bounded_param(params, "digest_tokens", DIGEST_TOKENS, MAX_DIGEST_TOKENS)
        readable = self.classes.readable(caller)  # the store's points: live classes
        history = self.classes.readable(caller, history=True)  # records: retired ones too
        seen = None if history is None else frozenset(history)
        rows = self.rows()
        records = (
            []
            if rows is None
            else changelog.read(rows, since=since, until=until, limit=limit, readable=seen)
        )
        files: dict[str, int] = {}
        for r in records:
            for f in r["files"]:
                files[f["action"]] = files.get(f["action"], 0) + 1
        out: dict[str, Any] = {
            "tree": self.tree,
            "since": iso(since),
            "until": iso(until) if until is not None else None,
            "records": [record_json(r) for r in records],
            "files": files,
            "complete": len(records) < limit,
        }
        if digest in ("1", "true", "llm"):
            out["digest"] = self.digest(records, readable, budget, llm=digest == "llm", since=since)
        return out

    def digest(
        self,
        records: list[dict[str, Any]],
        readable: tuple[str, ...] | None,
        max_tokens: int,
        *,
        llm: bool = False,
        since: float = 0.0,
    ) -> dict[str, Any]:
        """Return the summaries ``records`` name as they are now (highest layer, newest first),
        those a reader of the classes ``readable`` (None: all) may read (the store's reader
        filter, as at every door), within ``max_tokens``, numbered; with ``llm``, an answer
        written from them citing those numbers.

        Where the records name no summary the caller may read (a tree too small for layers, a
        change no summary covers yet: deferred), the changed files' own leaves stand in, in
        document order, newest change first."""
        order: dict[str, int] = {}
        for r in records:  # newest first; a summary named twice counts where it came first
            for s in sorted(r["summaries"], key=lambda s: -int(s[F.LAYER])):
                order.setdefault(s[F.NODE_ID], len(order))
        store = self.store
        chosen: list[NodePayload] = []
        parts: list[ContextPart] = []
        if store is None:
            return {"parts": [], "summaries_named": len(order), "answer": None}
        with self.lock:
            flt = SearchFilter(tree=self.tree, min_layer=1, ids=tuple(order), readable=readable)
            found, _ = store.scroll(flt, len(order)) if order else ([], None)
            nodes = sorted(found, key=lambda n: (-n.layer, order.get(n.node_id, 0)))
            if not nodes:
                nodes = self._changed_leaves(store, records, readable)
            chosen = fill(nodes, lambda n: n.n_tokens, max_tokens)
            if chosen:
                resolver = SpanResolver(store)
                parts = [
                    ContextPart(n.text, (n.node_id,), merge_spans(resolver.spans_of(n)))
                    for n in chosen
                ]
        out: dict[str, Any] = {
            "parts": [
                {"n": i, "node_id": n.node_id, "layer": n.layer, "text": n.text, **n.citation()}
                | ({"sources": list(n.sources)} if n.sources else {})
                for i, n in enumerate(chosen, start=1)
            ],
            "summaries_named": len(order),
            "answer": None,
        }
        if llm and self.llm is not None and parts:
            question = (
                f"What changed in these documents since {iso(since)}? Describe the changes "
                "and what the documents are about now, citing the numbered parts."
            )
            dropped = fit_prompt(question, parts, self.answer_tokens, self.input_limit)
            if dropped:  # past the model's input limit: the answer saw the first parts only
                out["parts"], out["parts_dropped"] = out["parts"][: len(parts)], dropped
            text = self.llm.complete(
                qa_messages(question, parts, self.answer_tokens), max_tokens=self.answer_tokens
            )
            used, unknown = citations_in(text, parts)
            out |= {
                "answer": text,
                "citations": [c.to_json() for c in used],
                "unknown_citations": unknown,
                "model": self.llm.model,
            }
        return out

    def _changed_leaves(
        self, store: NodeStore, records: list[dict[str, Any]], readable: tuple[str, ...] | None
    ) -> list[NodePayload]:
        """The leaves of the files ``records`` added or edited (newest first, at most
        :data:`LEAF_FILES` files), each file's in document order, as ``readable`` may read."""
        sources = list(
            dict.fromkeys(
                f["source"]
                for r in records
                for f in r["files"]
                if f["action"] in ("added", "edited")
            )
        )[:LEAF_FILES]
        out: list[NodePayload] = []
        for source in sources:
            flt = SearchFilter(tree=self.tree, max_layer=0, source_prefix=source, readable=readable)
            leaves, _ = store.scroll(flt, LEAF_SCROLL)
            out.extend(sorted(leaves, key=lambda n: n.chunk_index or 0))
        return out
