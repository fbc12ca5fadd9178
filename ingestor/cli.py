"""The ``adrap`` command. Settings, logging and every client are built here and only here."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import ValidationError

from ingestor.config import Settings
from ingestor.errors import IngestError
from ingestor.locking import StateLock, state_lock
from models_store import ModelStore, ModelStoreError
from retriever import Embedder, F, NodeStore, RetrieverError, SearchFilter

log = logging.getLogger(__name__)
T = TypeVar("T")

STORE_DIR = "qdrant"
MODELS_DIR = "models"


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for logs collected from containers."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str, verbose: bool) -> None:
    """Log JSON to stderr when it is not a terminal, plain lines otherwise."""
    handler = logging.StreamHandler(sys.stderr)
    if sys.stderr.isatty():
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S")
        )
    else:
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel("DEBUG" if verbose else level)
    for noisy in (
        "httpx",
        "httpx2",
        "openai",
        "sentence_transformers",
        "numba",
        "urllib3",
        "filelock",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def load_settings() -> Settings:
    """Build Settings exactly once: env, .env and /run/secrets when that directory exists."""
    secrets = Path("/run/secrets")
    if secrets.is_dir():
        return Settings(_secrets_dir=secrets)  # type: ignore[call-arg]
    return Settings()


# --- adapters: the only place clients are constructed ------------------------------------------


def make_embedder(settings: Settings) -> Embedder:
    from retriever import SentenceTransformerEmbedder

    e = settings.embed
    return SentenceTransformerEmbedder(e.model, batch_size=e.batch_size, device=e.device)


def make_store(settings: Settings) -> NodeStore:
    q = settings.qdrant
    if q.url:
        from retriever import QdrantNodeStore, connect

        key = q.api_key.get_secret_value() if q.api_key else None
        client = connect(
            q.url, key, timeout=q.timeout, prefer_grpc=q.prefer_grpc, verify=q.verify_tls
        )
        return QdrantNodeStore(client, q.collection)
    from retriever import EdgeNodeStore

    return EdgeNodeStore(settings.state_dir / STORE_DIR)


def make_summarizer(settings: Settings) -> Any:
    s = settings.summary
    if s.backend == "openai":
        import openai

        from ingestor.summarize import OpenAISummarizer

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
    from ingestor.summarize import ExtractiveSummarizer

    return ExtractiveSummarizer()


def make_pipeline(settings: Settings, store: NodeStore, embedder: Embedder) -> Any:
    from ingestor.clustering import TreeClusterer
    from ingestor.pipeline import Pipeline
    from ingestor.tree import TreeBuilder, TreeParams

    c = settings.cluster
    summary = settings.summary
    limit = summary.openai.max_input_tokens if summary.backend == "openai" else None

    def make_clusterer() -> TreeClusterer:
        return TreeClusterer(
            n_components=c.n_components,
            threshold=c.threshold,
            max_clusters=c.max_clusters,
            local_n_neighbors=c.local_n_neighbors,
            random_state=c.random_state,
            fit_sample=c.fit_sample,
        )

    builder = TreeBuilder(
        embedder,
        make_summarizer(settings),
        make_clusterer,
        TreeParams(
            max_layers=c.max_layers,
            min_top_nodes=c.min_top_nodes,
            summary_max_tokens=summary.max_tokens,
            max_input_tokens=limit,
            tau_c=settings.adrap.tau_c,
            greedy=settings.adrap.greedy,
        ),
    )
    return Pipeline(
        tree=settings.tree,
        embedder=embedder,
        builder=builder,
        store=store,
        models=ModelStore(settings.state_dir / MODELS_DIR),
        chunk_tokens=settings.chunk.max_tokens,
        chunk_overlap=settings.chunk.overlap,
        max_file_bytes=settings.read.max_file_bytes,
        ignore=settings.read.ignore,
        drift_threshold=settings.adrap.drift_threshold,
    )


def writer_lock(settings: Settings, command: str) -> AbstractContextManager[StateLock]:
    """Return the state dir's one-writer lock (entering raises ``LockedError`` naming the holder)."""
    return state_lock(settings.state_dir, command)


@contextmanager
def opened_store(settings: Settings) -> Iterator[NodeStore]:
    store = make_store(settings)
    try:
        yield store
    finally:
        store.close()


# --- commands -----------------------------------------------------------------------------------


class Ctx:
    def __init__(self, settings: Settings, verbose: bool) -> None:
        self.settings = settings
        self.verbose = verbose


def run(ctx: Ctx, fn: Callable[[], T]) -> T:
    """Run a command body; domain errors become one line and exit 1 (tracebacks under -v)."""
    try:
        return fn()
    except (IngestError, RetrieverError, ModelStoreError, ValueError) as exc:
        if ctx.verbose:
            log.exception("failed")
        raise click.ClickException(str(exc)) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Debug logs and tracebacks.")
@click.pass_context
def main(click_ctx: click.Context, verbose: bool) -> None:
    """adrap: a folder kept as a RAPTOR tree in Qdrant.

    \b
    Example:
      adrap build examples/sample && adrap query "Why did the fox call the grapes sour?"
    """
    try:
        settings = load_settings()
    except ValidationError as exc:
        lines = [
            f"  ADRAP_{'__'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors()
        ]
        raise click.ClickException("invalid configuration:\n" + "\n".join(lines)) from exc
    configure_logging(settings.log_level, verbose)
    click_ctx.obj = Ctx(settings, verbose)


@main.command()
@click.argument("root", type=click.Path(exists=True, file_okay=True, path_type=Path))
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: on a TTY).")
@click.pass_obj
def build(ctx: Ctx, root: Path, progress: bool | None) -> None:
    """Build the tree over ROOT (a folder or one file) from scratch and store it.

    \b
    Example:
      adrap build ./docs
    """
    from ingestor.pipeline import make_progress_printer

    def body() -> None:
        settings = ctx.settings
        show = make_progress_printer(sys.stderr.isatty() if progress is None else progress)
        embedder = make_embedder(settings)
        with writer_lock(settings, "build"), opened_store(settings) as store:
            report = make_pipeline(settings, store, embedder).build(root, show)
        layers = ", ".join(f"L{k}: {v}" for k, v in report.layers.items())
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in report.stats.seconds.items())
        click.echo(
            f"built tree {settings.tree!r} from {report.files} files: {report.leaves} leaves; "
            f"nodes per layer {layers or 'none'}; {report.stats.summary_calls} summaries "
            f"({report.stats.cache_hits} from cache); {report.seconds:.1f}s ({stages})"
        )
        for path, reason in report.skipped:
            click.echo(f"skipped {path}: {reason}", err=True)

    run(ctx, body)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.pass_obj
def add(ctx: Ctx, paths: tuple[Path, ...]) -> None:
    """Add or update files/folders under the tree's root in place (adRAP, no rebuild).

    New files are inserted, edited files re-chunked (unchanged chunks keep their nodes), files
    that vanished from a given folder are removed.

    \b
    Example:
      adrap add docs/new-report.md docs/minutes/
    """
    _update(ctx, list(paths), remove=False)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.pass_obj
def remove(ctx: Ctx, paths: tuple[Path, ...]) -> None:
    """Remove files/folders from the tree in place (the files themselves are not touched).

    \b
    Example:
      adrap remove docs/old-report.md
    """
    _update(ctx, list(paths), remove=True)


def _update(ctx: Ctx, paths: list[Path], *, remove: bool) -> None:
    def body() -> None:
        settings = ctx.settings
        embedder = make_embedder(settings)
        command = "remove" if remove else "add"
        with writer_lock(settings, command), opened_store(settings) as store:
            report = make_pipeline(settings, store, embedder).update(paths, remove=remove)
        click.echo(report.summary())
        for path, reason in report.skipped:
            click.echo(f"skipped {path}: {reason}", err=True)

    run(ctx, body)


@main.command()
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: on a TTY).")
@click.pass_obj
def rebuild(ctx: Ctx, progress: bool | None) -> None:
    """Rebuild every summary layer over the current leaves (cached summaries are reused).

    \b
    Example:
      adrap rebuild
    """
    from ingestor.pipeline import make_progress_printer

    def body() -> None:
        settings = ctx.settings
        show = make_progress_printer(sys.stderr.isatty() if progress is None else progress)
        embedder = make_embedder(settings)
        with writer_lock(settings, "rebuild"), opened_store(settings) as store:
            report = make_pipeline(settings, store, embedder).rebuild(show)
        layers = ", ".join(f"L{k}: {v}" for k, v in report.layers.items())
        click.echo(
            f"rebuilt tree {settings.tree!r}: {report.leaves} leaves; nodes per layer {layers}; "
            f"{report.stats.summary_calls} summaries ({report.stats.cache_hits} from cache); "
            f"{report.seconds:.1f}s"
        )

    run(ctx, body)


@main.command()
@click.argument("question")
@click.option("--mode", type=click.Choice(["collapsed", "traversal"]), default=None)
@click.option("--max-tokens", type=click.IntRange(min=1), default=None, help="Context budget.")
@click.option(
    "--top-k", type=click.IntRange(min=1), default=None, help="Traversal: nodes per layer."
)
@click.option(
    "--source", "source_prefix", default=None, help="Only sources under this folder/ or this file."
)
@click.option(
    "--layers", default=None, help="Layer range, e.g. 0-0 for leaves only, 1- for summaries."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: hits with provenance + context.")
@click.pass_obj
def query(
    ctx: Ctx,
    question: str,
    mode: str | None,
    max_tokens: int | None,
    top_k: int | None,
    source_prefix: str | None,
    layers: str | None,
    as_json: bool,
) -> None:
    """Retrieve the context for QUESTION from the tree.

    \b
    Example:
      adrap query "How does Cinderella find a happy ending?" --max-tokens 1000 --json
    """
    from retriever import answer_json, run_query

    def body() -> None:
        s = ctx.settings
        lo, hi = _parse_layers(layers)
        flt = SearchFilter(tree=s.tree, min_layer=lo, max_layer=hi, source_prefix=source_prefix)
        budget = max_tokens or s.query.max_tokens
        chosen = mode or s.query.mode
        params = {
            "q": question,
            "mode": chosen,
            "max_tokens": budget,
            "top_k": top_k or s.query.top_k,
        }
        remote = _query_daemon(
            s, params | {"source": source_prefix, "min_layer": lo, "max_layer": hi}
        )
        if remote is not None:
            _echo_answer(remote, as_json, by=" (answered by adrap watch)")
            return
        embedder = make_embedder(s)
        t0 = time.perf_counter()
        with opened_store(s) as store:
            store.ensure_collection(embedder.dim, embedder.model_id)
            if store.count(SearchFilter(tree=s.tree)) == 0:
                raise click.ClickException(
                    f"tree {s.tree!r} is empty in {_where(s)}: run `adrap build DIR` first"
                )
            vec = embedder.embed_query(question)
            hits = run_query(
                store, vec, flt, mode=chosen, max_tokens=budget, top_k=top_k or s.query.top_k
            )
        out = answer_json(question, chosen, s.tree, budget, hits, time.perf_counter() - t0)
        _echo_answer(out, as_json)

    run(ctx, body)


def _query_daemon(s: Settings, params: dict[str, Any]) -> dict[str, Any] | None:
    """Ask the running ``adrap watch`` for the answer when it owns the embedded store, else None."""
    import urllib.error
    import urllib.parse
    import urllib.request

    from ingestor.locking import read_holder

    if s.store_mode != "embedded":
        return None
    holder = read_holder(s.state_dir)
    if holder is None:
        return None
    who = f"adrap {holder.get('command', '?')} (pid {holder.get('pid', '?')})"
    address = holder.get("http")
    if holder.get("command") != "watch" or not address:
        raise click.ClickException(
            f"the embedded store in {_where(s)} is in use by {who}; query when it has finished"
        )
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    try:
        with urllib.request.urlopen(f"http://{address}/query?{query}", timeout=120) as resp:
            out: dict[str, Any] = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")
        raise click.ClickException(
            f"{who} answered {exc.code} at http://{address}/query: {detail}"
        ) from exc
    except (OSError, ValueError) as exc:
        raise click.ClickException(
            f"the embedded store is owned by {who}, whose HTTP endpoint http://{address} does not "
            f"answer ({exc}); check `curl http://{address}/healthz`"
        ) from exc
    log.debug("answered by %s at %s", who, address)
    return out


def _echo_answer(out: dict[str, Any], as_json: bool, by: str = "") -> None:
    """Print an answer of ``answer_json``: as JSON, or one header line and the text per hit."""
    if as_json:
        click.echo(json.dumps(out, ensure_ascii=False, indent=2))
        return
    for h in out["hits"]:
        where = (
            f"{h[F.SOURCE]}:{h[F.CHAR_START]}-{h[F.CHAR_END]}"
            if h[F.LAYER] == 0
            else ", ".join(h[F.SOURCES])
        )
        head = f"[{h['score']:.3f}] layer {h[F.LAYER]} · {h[F.N_TOKENS]} tok · {where}"
        click.echo(click.style(head, bold=True))
        click.echo(h[F.TEXT] + "\n")
    click.echo(
        f"{len(out['hits'])} nodes, {out['total_tokens']}/{out['max_tokens']} tokens, {out['mode']}, "
        f"{out['seconds'] * 1000:.0f} ms{by}",
        err=True,
    )


def _parse_layers(spec: str | None) -> tuple[int | None, int | None]:
    if not spec:
        return None, None
    lo, sep, hi = spec.partition("-")
    try:
        low = int(lo) if lo else None
        high = (int(hi) if hi else None) if sep else low
    except ValueError:
        raise click.BadParameter(f"{spec!r}: use N, N-M, N- or -M", param_hint="--layers") from None
    return low, high


def _where(s: Settings) -> str:
    return s.qdrant.url or str(s.state_dir / STORE_DIR)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status(ctx: Ctx, as_json: bool) -> None:
    """Show the tree: documents, leaves, nodes per layer, drift, state dir and store mode.

    \b
    Example:
      adrap status --json
    """
    from ingestor.pipeline import state_name

    def body() -> None:
        s = ctx.settings
        models = ModelStore(s.state_dir / MODELS_DIR)
        name = state_name(s.tree)
        out: dict[str, Any] = {
            "tree": s.tree,
            "state_dir": str(s.state_dir.resolve()),
            "store_mode": s.store_mode,
            "store": _where(s),
            "built": models.exists(name),
        }
        if models.exists(name):
            state = models.load(name)
            counts = state.layer_counts()
            out |= {
                "root": state.root,
                "documents": len(state.sources),
                "leaves": counts.get(0, 0),
                "nodes_per_layer": {str(k): v for k, v in counts.items()},
                "embed_model": state.embed_model,
                "generation": state.generation,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.built_at)),
                "leaves_added_since_build": state.added_since_build,
                "leaves_removed_since_build": state.removed_since_build,
            }
        if as_json:
            click.echo(json.dumps(out, indent=2))
        else:
            for k, v in out.items():
                click.echo(f"{k:<28} {v}")

    run(ctx, body)


@main.command()
@click.option("--env", "as_env", is_flag=True, help="Print as ADRAP_* variables.")
@click.pass_obj
def config(ctx: Ctx, as_env: bool) -> None:
    """Print the effective configuration, secrets masked.

    \b
    Example:
      ADRAP_QDRANT__URL=http://localhost:6333 adrap config --env
    """
    data = ctx.settings.masked()
    if not as_env:
        click.echo(json.dumps(data, indent=2))
        return
    for name, value in _flatten(data, "ADRAP_"):
        click.echo(f"{name}={'' if value is None else value}")


def _flatten(data: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key.upper()}__")
        else:
            yield f"{prefix}{key.upper()}", json.dumps(value) if isinstance(value, list) else value


@main.command()
@click.argument("root", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--polling/--native",
    default=None,
    help="Poll the folder instead of inotify (NFS/SMB shares, Docker bind mounts).",
)
@click.option(
    "--debounce", type=click.FloatRange(min=0), default=None, help="Quiet seconds ending a burst."
)
@click.option(
    "--http-port",
    type=click.IntRange(min=-1, max=65535),
    default=None,
    help="HTTP port (0: any free port, -1: no HTTP).",
)
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: on a TTY).")
@click.pass_obj
def watch(
    ctx: Ctx,
    root: Path,
    polling: bool | None,
    debounce: float | None,
    http_port: int | None,
    progress: bool | None,
) -> None:
    """Keep the tree equal to the folder ROOT until SIGTERM/SIGINT (the daemon).

    Reconciles at start (first run: full build), then applies each burst of changes as one adRAP
    batch. Serves /healthz /readyz /metrics /status /query on 127.0.0.1:8765 (ADRAP_WATCH__*).

    \b
    Example:
      adrap watch ./docs --polling --debounce 2
    """
    import signal
    import threading

    from ingestor.daemon import Daemon
    from ingestor.pipeline import make_progress_printer

    def body() -> None:
        s = ctx.settings
        w = s.watch
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            if stop.is_set():
                raise KeyboardInterrupt
            log.info("received %s: stopping", signal.Signals(signum).name)
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        show = make_progress_printer(sys.stderr.isatty() if progress is None else progress)
        embedder = make_embedder(s)
        with writer_lock(s, "watch") as lock, opened_store(s) as store:
            daemon = Daemon(
                make_pipeline(s, store, embedder),
                root,
                polling=w.polling if polling is None else polling,
                poll_interval=w.poll_interval,
                debounce=w.debounce_seconds if debounce is None else debounce,
                max_backoff=w.max_backoff_seconds,
                http_host=w.http_host,
                http_port=w.http_port if http_port is None else http_port,
                ignore=s.read.ignore,
                exclude=[s.state_dir.resolve()],
                state_lock=lock,
                query_defaults=(s.query.mode, s.query.max_tokens, s.query.top_k),
            )
            daemon.run(stop, show)

    run(ctx, body)


if __name__ == "__main__":
    main()
