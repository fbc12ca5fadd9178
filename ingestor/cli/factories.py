"""The composition root: the only place clients (embedder, store, summariser, pipeline) and the
daemon's parts (:func:`make_daemon_parts`) are constructed, each once, from the settings.

Each library is imported by the function that needs it, so a command loads only what it uses.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingestor.errors import TreeError
from ingestor.service.locking import StateLock, reader_lock, state_lock

if TYPE_CHECKING:
    from ingestor.config import Settings
    from ingestor.pipeline import Pipeline
    from ingestor.service.daemon import DaemonParts
    from retriever import Embedder, NodeStore

log = logging.getLogger(__name__)

STORE_DIR = "qdrant"
MODELS_DIR = "models"


def make_embedder(settings: Settings) -> Embedder:
    """Return the embedder of ``ADRAP_EMBED__BACKEND``: in process, or an OpenAI-compatible server.

    In process: :func:`retriever.in_process.in_process` (the packaged model on torch alone).

    Raises:
        EmbeddingError: the model cannot be loaded / the server cannot be reached.
    """
    e = settings.embed
    if e.backend == "openai":
        import httpx

        from retriever import OpenAIEmbedder

        o = e.openai
        headers = {"Authorization": f"Bearer {o.api_key.get_secret_value()}"} if o.api_key else {}
        client = httpx.Client(
            base_url=o.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=o.timeout,
            limits=httpx.Limits(max_connections=o.concurrency),
        )
        try:
            return OpenAIEmbedder(
                client,
                e.model,
                batch_size=e.batch_size,
                concurrency=o.concurrency,
                max_retries=o.max_retries,
                input_type=o.input_type,
            )
        except BaseException:
            client.close()
            raise
    from retriever.in_process import in_process

    return in_process(e.model, batch_size=e.batch_size, device=e.device)


def make_query_embedder(settings: Settings) -> Embedder:
    """Return an embedder for the questions of one command (``adrap query``/``ask``, no daemon).

    The packaged model (any sentence-transformers BERT with mean pooling) runs in numpy, the
    same vectors without loading torch (~5 s cold); other models come from :func:`make_embedder`.

    Raises:
        EmbeddingError: the model cannot be loaded / the server cannot be reached.
    """
    e = settings.embed
    if e.backend == "sentence-transformers":
        from retriever import EmbeddingError, NumpyBertEmbedder

        try:
            return NumpyBertEmbedder(e.model)
        except EmbeddingError as exc:
            log.debug("questions embedded by sentence-transformers: %s", exc)
    return make_embedder(settings)


def make_store(settings: Settings) -> NodeStore:
    q = settings.qdrant
    if q.url:
        from retriever import QdrantNodeStore, connect

        key = q.api_key.get_secret_value() if q.api_key else None
        client = connect(
            q.url, key, timeout=q.timeout, prefer_grpc=q.prefer_grpc, verify=q.verify_tls
        )
        return QdrantNodeStore(
            client,
            q.collection,
            shard_number=q.shard_number,
            replication_factor=q.replication_factor,
            write_consistency_factor=q.write_consistency_factor,
        )
    from retriever import EdgeNodeStore
    from retriever.room import MIB

    return EdgeNodeStore(settings.state_dir / STORE_DIR, reserve=settings.min_free_mb * MIB)


def make_summarizer(settings: Settings) -> Any:
    s = settings.summary
    if s.backend == "openai":
        import openai

        from ingestor.summarize.openai_compat import OpenAISummarizer

        o = s.openai
        client = openai.OpenAI(
            base_url=o.base_url,
            api_key=o.api_key.get_secret_value() if o.api_key else "not-needed",
            max_retries=0,  # the adapter retries with backoff itself
            timeout=o.timeout,
        )
        return OpenAISummarizer(
            client, o.model, concurrency=o.concurrency, max_retries=o.max_retries, timeout=o.timeout
        )
    from ingestor.summarize.extractive import ExtractiveSummarizer

    return ExtractiveSummarizer()


def make_access(settings: Settings) -> Any:
    """Return the tree's access classes: the registry in the state dir, and the access file
    (``access.toml``) of mounts without permissions (:mod:`ingestor.read.permissions`).

    Raises:
        ConfigError: the access file is malformed or names an unknown user or group.
    """
    from ingestor.errors import ConfigError
    from ingestor.pipeline.access import TreeAccess
    from ingestor.read.access_classes import CLASSES_FILE, ClassRegistry
    from ingestor.read.permissions import ACCESS_FILE, AccessFile

    try:
        path = settings.state_dir / ACCESS_FILE
        return TreeAccess(
            ClassRegistry(settings.state_dir / CLASSES_FILE), AccessFile.load(path), path
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def make_callers(settings: Settings, owner_token: str | None) -> Any:
    """Return who the daemon's requests are (:class:`~ingestor.service.identity.Callers`): the
    owner's token, the named tokens of the state dir, the trusted proxy's header.

    Raises:
        ConfigError: a proxy header without the proxy's addresses.
    """
    from ingestor.errors import ConfigError
    from ingestor.service.identity import TOKENS_FILE, Callers, TokenBook

    a = settings.access
    try:
        return Callers(
            owner_token,
            TokenBook(settings.state_dir / TOKENS_FILE),
            proxy_header=a.proxy_header,
            proxy_addresses=a.proxy_addresses,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def make_query_service(
    settings: Settings,
    store: NodeStore,
    embedder: Embedder,
    classes: Any = None,
    *,
    lock: Any = None,
) -> Any:
    """Return the QueryService of ``adrap query``/``ask`` and the daemon (one code path).

    postQFRAP summarises with the summary backend (``openai``: [A] Table 5's prompt; otherwise
    the offline query-focused extractive summariser); answers need the ``openai`` backend.
    """
    from ingestor.answer.service import QueryDefaults, QueryService

    llm = make_summarizer(settings) if settings.summary.backend == "openai" else None
    q, p = settings.query, settings.postqfrap
    defaults = QueryDefaults(
        mode=q.mode,
        max_tokens=q.max_tokens,
        top_k=q.top_k,
        k0=p.k0,
        base=p.base,
        summary_tokens=p.summary_tokens,
        answer_tokens=settings.answer.max_tokens,
        hybrid=q.hybrid,
        max_tokens_limit=settings.watch.http_max_tokens,
        top_k_limit=settings.watch.http_max_top_k,
    )
    return QueryService(
        store,
        embedder,
        settings.tree,
        defaults=defaults,
        summarizer=llm,
        llm=llm,
        random_state=settings.cluster.random_state,
        min_score=functools.partial(min_score, settings),  # the model that embeds, each time
        classes=classes,
        lock=lock,
        answer_input_limit=settings.summary.openai.max_input_tokens if llm is not None else None,
    )


def min_score(settings: Settings, model_id: str) -> float | None:
    """Return the no-match threshold: the setting, else the calibrated one of the packaged model
    when ``model_id`` (the model that embedded the question: a daemon's follows a change of
    model) is it, else None (no check)."""
    from ingestor.config import NO_MATCH_SCORE, PACKAGED_MODEL

    if settings.query.min_score is not None:
        return settings.query.min_score
    return NO_MATCH_SCORE if model_id == PACKAGED_MODEL else None


def make_change_feed(settings: Settings, queries: Any) -> Any:
    """Return the reader of the tree's change log (``adrap changes``, ``/changes``, the MCP tool)
    over ``queries`` (its store, access classes and LLM); it opens the state database read-only
    when asked, and creates nothing."""
    from ingestor.answer.changes import ChangeFeed, state_rows

    return ChangeFeed.over(state_rows(state_db(settings)), queries)


def state_db(settings: Settings) -> Path:
    """Return the tree's state database file (nothing is opened or created)."""
    from ingestor.tree.persist import state_file

    return state_file(settings.state_dir / MODELS_DIR, settings.tree)


def make_pipeline(
    settings: Settings,
    store: NodeStore,
    embedder: Embedder,
    access: Any = None,
    *,
    defer_summaries: Callable[[], bool] | None = None,
    on_model_switch: Callable[[], None] | None = None,
    queries_lock: Any = None,
    before: tuple[Embedder, str] | None = None,
) -> Pipeline:
    """Return the tree's pipeline over ``store`` (``defer_summaries``: asked at each update
    whether its summaries wait for the daemon's schedule; None: they are paid at once).

    Its writers move a tree built with another embedding model to ``embedder``'s before they
    open it (:mod:`ingestor.tree.model_change`); ``on_model_switch`` is called when the store
    switches (the daemon's query embedder follows), both under ``queries_lock`` (the daemon's
    query lock: no question is embedded with one model and searched in the other's store).

    ``before``: the embedder of the model the tree holds, and its id (the daemon's, when it can
    be loaded): the change then copies in steps between updates
    (:meth:`~ingestor.tree.model_change.ModelChange.step`), which embed with it until the
    switch; without it, the change runs whole before the writer's first update."""
    from ingestor.cluster.parallel import worker_count
    from ingestor.cluster.two_step import TreeClusterer
    from ingestor.pipeline import Pipeline
    from ingestor.pipeline.budget import ReadBudget
    from ingestor.pipeline.unread import UNREAD_FILE, Unread
    from ingestor.pipeline.vectors import DedupingEmbedder
    from ingestor.tree.build import TreeBuilder, TreeParams
    from ingestor.tree.changelog import Retention
    from ingestor.tree.model_change import ModelChange
    from models_store import ModelStore

    c = settings.cluster
    r = settings.read
    summary = settings.summary
    limit = summary.openai.max_input_tokens if summary.backend == "openai" else None
    if not isinstance(embedder, DedupingEmbedder):  # a share's copies: one text, one embedding
        embedder = DedupingEmbedder(embedder)
    writer: Embedder = embedder
    follower = None
    if before is not None:  # updates embed with the tree's model until the switch
        from retriever.model_switch import FollowingEmbedder

        follower = FollowingEmbedder(DedupingEmbedder(before[0]), embedder, before[1])
        writer = follower
    workers = worker_count(settings.build.workers)

    def make_clusterer() -> TreeClusterer:
        return TreeClusterer(
            n_components=c.n_components,
            threshold=c.threshold,
            max_clusters=c.max_clusters,
            local_n_neighbors=c.local_n_neighbors,
            random_state=c.random_state,
            fit_sample=c.fit_sample,
            max_group=c.max_group or None,
            max_cluster_size=c.max_cluster_size or None,
            workers=workers,
        )

    builder = TreeBuilder(
        writer,
        make_summarizer(settings),
        make_clusterer,
        TreeParams(
            max_layers=c.max_layers,
            min_top_nodes=c.min_top_nodes,
            summary_max_tokens=summary.max_tokens,
            max_input_tokens=limit,
            tau_c=settings.adrap.tau_c,
            tau_n=settings.adrap.tau_n or None,
            greedy=settings.adrap.greedy,
            refit_share=settings.adrap.refit_share,
            max_node_sources=c.max_node_sources,
            min_change=summary.min_change,
            soft_margin=summary.soft_margin,
        ),
        workers=workers,
    )
    models = ModelStore(settings.state_dir / MODELS_DIR)
    change = ModelChange(
        models,
        settings.tree,
        store,
        embedder,
        builder,
        on_switch=on_model_switch if follower is None else _both(follower.switch, on_model_switch),
        queries=queries_lock,
        nice=settings.watch.writer_nice,  # yields the cores to questions, as updates do
    )
    change.stepwise = follower is not None
    pipeline = Pipeline(
        tree=settings.tree,
        embedder=writer,
        builder=builder,
        store=store,
        models=models,
        model_change=change,
        chunk_tokens=settings.chunk.max_tokens,
        chunk_overlap=settings.chunk.overlap,
        max_file_bytes=settings.read.max_file_bytes,
        ignore=settings.read.ignore,
        drift_threshold=settings.adrap.drift_threshold,
        rebuild_max_leaves=settings.rebuild_bound,
        ocr=settings.read.ocr,
        text_suffixes=settings.read.text_suffixes,
        access=access if access is not None else make_access(settings),
        read_budget=ReadBudget(r.worker_memory_bytes, r.worker_seconds, r.worker_files),
        unread=Unread(settings.state_dir / UNREAD_FILE),
        defer_summaries=defer_summaries,
        retention=Retention(settings.changes.keep_records, settings.changes.keep_days),
    )
    if change.stepwise:
        pipeline.context.copy_marks = change.marks
    return pipeline


def _both(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    def both() -> None:
        first()
        if then is not None:
            then()

    return both


def make_summary_schedule(settings: Settings) -> Any:
    """Return when the daemon regenerates stale summaries, and the LLM's token budget."""
    from ingestor.service.summary_schedule import SummarySchedule, TokenBudget

    s = settings.summary
    return SummarySchedule(
        window=s.refresh_seconds,
        idle=s.refresh_idle_seconds,
        budget=TokenBudget(s.max_tokens_per_hour, s.max_tokens_per_day),
    )


def make_daemon_parts(
    settings: Settings, store: NodeStore, embedder: Embedder, owner_token: str | None
) -> DaemonParts:
    """The composition root of ``adrap watch``: every part of the daemon built once, ready.

    The store is put behind a lock per call first, and both the writer's pipeline and the
    query service are built over that locked store; queries get an embedder of their own (the
    writer's is busy during updates; a remote embedder's client cannot be copied); the
    pipeline's updates ask the summary schedule whether to defer their summaries.
    """
    from ingestor.service.concurrency import lock_store
    from ingestor.service.daemon import DaemonParts
    from ingestor.service.deadline import BoundedLock

    locked = lock_store(store)
    access = make_access(settings)
    summaries = make_summary_schedule(settings)
    question_embedder = make_query_embedder(settings)
    follower = following_embedder(settings, embedder, question_embedder)
    query_lock = BoundedLock("the query embedder")  # queries; the writer only at a model switch
    queries = make_query_service(
        settings, locked, follower or question_embedder, access.registry, lock=query_lock
    )
    writer = tree_model(settings, embedder) if follower is not None and follower.old else None
    pipeline = make_pipeline(
        settings,
        locked,
        embedder,
        access,
        defer_summaries=summaries.defers_now,
        on_model_switch=None if follower is None else follower.switch,
        queries_lock=query_lock,
        before=(writer[0], writer[1]) if writer is not None and writer[0] is not None else None,
    )
    return DaemonParts(
        pipeline,
        locked,
        queries,
        summaries,
        make_callers(settings, owner_token),
        make_change_feed(settings, queries),
    )


def following_embedder(settings: Settings, embedder: Embedder, questions: Embedder) -> Any:
    """Return the daemon's query embedder while its tree changes embedding model: the model the
    live store holds (the state's) until the switch, then ``questions`` (the setting's); None
    when the state is already ``embedder``'s model (or not built). A model that cannot be
    loaded any more leaves questions refused, with the reason, until the switch."""
    from retriever.model_switch import FollowingEmbedder

    found = tree_model(settings, embedder)
    if found is None:
        return None
    before, old = found
    return FollowingEmbedder(before, questions, old)


def tree_model(settings: Settings, embedder: Embedder) -> tuple[Embedder | None, str] | None:
    """Return an embedder of the model the tree holds when it is not ``embedder``'s (None when
    it is, or no tree is built), with that model's id: the embedder is None when the model
    cannot be loaded any more (logged)."""
    from ingestor.tree.model_change import stored_model
    from retriever import EmbeddingError
    from retriever.schema import model_backend

    found = stored_model(state_db(settings))
    if found is None or found == (embedder.model_id, embedder.dim):
        return None
    old, _ = found
    e = settings.embed
    backend, name = model_backend(old)
    then = e.model_copy(update={"backend": backend, "model": name})
    try:
        return make_query_embedder(settings.model_copy(update={"embed": then})), old
    except EmbeddingError as exc:
        log.warning(
            "the tree's embedding model %r cannot be loaded (%s): questions are refused and "
            "updates wait until the change to %r is done",
            old,
            exc,
            embedder.model_id,
        )
        return None, old


@contextmanager
def writer_lock(settings: Settings, command: str) -> Iterator[StateLock]:
    """Hold the state dir's one-writer lock (entering raises ``LockedError`` naming the holder).

    A command that writes an embedded store is refused next, before it reads anything, when
    its disk has less than ``ADRAP_MIN_FREE_MB`` free (``watch`` starts anyway: it serves
    queries, and holds each update until there is room).

    Raises:
        LockedError: another writer holds it.
        StoreFullError: too little free space (the message says how much is free and needed).
    """
    with state_lock(settings.state_dir, command) as lock:
        if settings.store_mode == "embedded" and command != "watch":
            from retriever.room import MIB, check_room

            check_room(settings.state_dir, settings.min_free_mb * MIB, f"run adrap {command}")
        yield lock


@contextmanager
def opened_store(settings: Settings) -> Iterator[NodeStore]:
    store = make_store(settings)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def reading_store(settings: Settings) -> Iterator[NodeStore]:
    """Open the store for a read-only command; create nothing, and keep a writer waiting meanwhile.

    Raises:
        TreeError: the embedded store was never created (the tree is empty / not built).
        WriterActiveError: a writer (e.g. the daemon) holds the state dir: ask it instead.
    """
    if settings.store_mode == "server":
        with opened_store(settings) as store:
            yield store
        return
    require_built(settings)
    path = settings.state_dir / STORE_DIR
    with reader_lock(settings.state_dir):
        if not _has_store(path):  # removed while we waited
            raise TreeError(f"tree {settings.tree!r} is empty: no store in {path} (not built)")
        with opened_store(settings) as store:
            yield store


def require_built(settings: Settings) -> None:
    """Raise TreeError unless the embedded store exists (server mode: nothing to check here)."""
    path = settings.state_dir / STORE_DIR
    if settings.store_mode == "embedded" and not _has_store(path):
        raise TreeError(
            f"tree {settings.tree!r} is empty: no store in {path} (not built); run `adrap build "
            "DIR` or `adrap watch DIR` first"
        )


def _has_store(path: Path) -> bool:
    try:
        return path.is_dir() and any(path.iterdir())
    except PermissionError as exc:
        raise TreeError(
            f"the tree's store in {path.parent} is private to the account that keeps it; ask its "
            "daemon instead, which answers with what you may read: `adrap query`, `adrap ask` and "
            "`adrap status` over its socket, its /dashboard with a named token from that account "
            "(`adrap token add NAME --user YOU`); if none runs, start `adrap watch` as that account"
        ) from exc


def where(s: Settings) -> str:
    """Return where the tree's points are: the server URL or the embedded store's folder."""
    return s.qdrant.url or str(s.state_dir / STORE_DIR)
