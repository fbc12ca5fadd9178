"""A daemon (and a watcher) over a pipeline a test (or a benchmark) built by hand.

The product builds a daemon's parts from the settings (``cli.factories.make_daemon_parts``); a test
builds its pipeline itself (fake embedder, small trees) and hands it here with the watch options it
needs, by their short names. The pipeline comes built as the daemon's is: over the store behind the
lock per call (``lock_store``; :func:`testkit.corpus.make_pipeline` builds it so) and, given a
summary schedule, asking it whether to defer (``defer_summaries=schedule.defers_now``); here the
queries get their own embedder over that store, as ``make_daemon_parts`` builds them. Nothing the
pipeline was given is replaced.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from watchdog.events import DirMovedEvent, FileMovedEvent

from ingestor.answer.changes import ChangeFeed, state_rows
from ingestor.answer.service import QueryDefaults, QueryService
from ingestor.config import Settings, WatchSettings
from ingestor.pipeline import Pipeline
from ingestor.pipeline.reports import UpdateReport
from ingestor.read.listing import DEFAULT_IGNORE
from ingestor.service.concurrency import LockedStore
from ingestor.service.daemon import Daemon, DaemonParts
from ingestor.service.deadline import BoundedLock
from ingestor.service.events import PathFilter
from ingestor.service.failures import Quarantine
from ingestor.service.http import HttpLimits
from ingestor.service.identity import Callers
from ingestor.service.locking import StateLock
from ingestor.service.summary_schedule import SummarySchedule
from ingestor.service.watcher import Hooks, Timing, Watcher
from ingestor.tree.persist import state_path
from ingestor.tree.state import TreeState
from retriever import Embedder

#: Short names tests use -> the watch settings' fields.
_WATCH_NAMES = {
    "debounce": "debounce_seconds",
    "close_grace": "close_grace_seconds",
    "max_backoff": "max_backoff_seconds",
}
#: HttpLimits' fields -> the watch settings' fields.
_LIMIT_NAMES = {
    "max_tokens": "http_max_tokens",
    "max_top_k": "http_max_top_k",
    "query_timeout": "http_query_timeout",
    "concurrency": "http_concurrency",
    "head_timeout": "http_head_timeout",
    "per_client": "http_per_client",
    "allowed_hosts": "allowed_hosts",
}


def daemon_parts(
    pipeline: Pipeline,
    *,
    queries: QueryService | None = None,
    query_embedder: Embedder | None = None,
    summaries: SummarySchedule | None = None,
    callers: Callers | None = None,
    owner_token: str | None = None,
    limits: HttpLimits | None = None,
) -> DaemonParts:
    """Return the daemon's parts around a hand-built ``pipeline``, built over a locked store
    and asking ``summaries`` (when given) whether to defer; ``queries``, when given, over that
    store too; ``limits``: the largest ``max_tokens``/``top_k`` its query service takes (the
    settings').

    Raises:
        TypeError: the pipeline's store is not behind the lock.
        ValueError: the pipeline does not ask ``summaries`` whether to defer.
    """
    limits = limits or HttpLimits()
    ctx = pipeline.context
    locked = ctx.store
    if not isinstance(locked, LockedStore):
        raise TypeError(
            f"daemon_parts: the pipeline's store is a {type(locked).__name__}; build the "
            "pipeline over lock_store(store), as the daemon's is (testkit.corpus.make_pipeline)"
        )
    if summaries is not None and pipeline.apply_stage.defer_summaries != summaries.defers_now:
        raise ValueError(
            "daemon_parts: build the pipeline with defer_summaries=summaries.defers_now"
        )
    schedule = summaries or SummarySchedule(window=0, idle=0)  # defers nothing, as a pipeline
    if queries is None:
        queries = QueryService(
            locked,
            query_embedder or copy.deepcopy(ctx.embedder),
            ctx.tree,
            defaults=QueryDefaults(
                max_tokens_limit=limits.max_tokens, top_k_limit=limits.max_top_k
            ),
            classes=ctx.access.registry,
            lock=BoundedLock("the query embedder"),
        )
    rows = state_rows(state_path(pipeline.context.models, pipeline.context.tree))
    return DaemonParts(
        pipeline,
        locked,
        queries,
        schedule,
        callers or Callers(owner_token=owner_token),
        ChangeFeed.over(rows, queries),
    )


def make_daemon(
    pipeline: Pipeline,
    root: Path,
    *,
    state_dir: Path | None = None,
    state_lock: StateLock | None = None,
    owner_link: Callable[[str], None] | None = None,
    confirm_deletions: bool = False,
    limits: HttpLimits | None = None,
    access_check_interval: float = 2.0,
    queries: QueryService | None = None,
    query_embedder: Embedder | None = None,
    summaries: SummarySchedule | None = None,
    callers: Callers | None = None,
    **watch: Any,
) -> Daemon:
    """Return a daemon over ``pipeline`` watching ``root``: no HTTP (``http_port=-1``), no
    socket and the native observer unless asked; ``watch``: the watch settings by their field
    names or the short ones (``debounce``, ``close_grace``, ``max_backoff``)."""
    fields: dict[str, Any] = {"http_port": -1, "socket": False, "polling": False}
    for name, value in watch.items():
        field = _WATCH_NAMES.get(name, name)
        if field not in WatchSettings.model_fields:
            raise TypeError(f"make_daemon: {name!r} is no watch setting")
        fields[field] = value
    if limits is not None:
        fields.update({_LIMIT_NAMES[k]: getattr(limits, k) for k in _LIMIT_NAMES})
        fields["allowed_hosts"] = list(limits.allowed_hosts)
    token = fields.get("http_token")
    if isinstance(token, str):
        fields["http_token"] = SecretStr(token)
    if fields.get("max_held_rows") is None:
        fields.pop("max_held_rows", None)
    base = Settings(  # type: ignore[call-arg]
        _env_file=None,
        tree=pipeline.context.tree,
        state_dir=state_dir or pipeline.context.models.root.parent,
    )
    settings = base.model_copy(
        update={
            "watch": base.watch.model_copy(update=fields),
            "access": base.access.model_copy(update={"check_seconds": access_check_interval}),
        }
    )
    parts = daemon_parts(
        pipeline,
        queries=queries,
        query_embedder=query_embedder,
        summaries=summaries,
        callers=callers,
        owner_token=token if isinstance(token, str) else None,
        limits=HttpLimits.of(settings.watch),
    )
    return Daemon(
        parts,
        root,
        settings,
        state_lock=state_lock,
        owner_link=owner_link,
        confirm_deletions=confirm_deletions,
    )


#: The watcher's options tests pass by name -> where they go.
_TIMING = {f for f in Timing.__dataclass_fields__}
_HOOKS = {f for f in Hooks.__dataclass_fields__}


def make_watcher(
    pipeline: Pipeline,
    state: TreeState,
    root: Path,
    *,
    ignore: Sequence[str] = DEFAULT_IGNORE,
    exclude: Sequence[Path] = (),
    lock: threading.Lock | None = None,
    guard: Any = None,
    quarantine: Quarantine | None = None,
    **options: Any,
) -> Watcher:
    """Return a watcher over ``root``; ``options``: :class:`Timing`'s and :class:`Hooks`' fields
    by name (``debounce=0.05``, ``on_applied=...``)."""
    unknown = set(options) - _TIMING - _HOOKS
    if unknown:
        raise TypeError(f"make_watcher: {sorted(unknown)} are no watcher options")
    return Watcher(
        pipeline,
        state,
        PathFilter(root, ignore, exclude),
        Timing(**{k: v for k, v in options.items() if k in _TIMING}),
        hooks=Hooks(**{k: v for k, v in options.items() if k in _HOOKS}),
        lock=lock,
        guard=guard,
        quarantine=quarantine,
    )


def watched_move(w: Watcher, old: Path, new: Path) -> UpdateReport:
    """Rename ``old`` (a file or a folder) to ``new`` as a user would, hand ``w`` the move event
    its observer sends, apply the batch and return its report."""
    old.rename(new)
    event = DirMovedEvent if new.is_dir() else FileMovedEvent
    w.handler.dispatch(event(str(old), str(new)))
    assert w.apply(w.next_batch())
    assert w.last_report is not None
    return w.last_report
