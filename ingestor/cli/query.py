"""``adrap query``: retrieve a context from the tree, through the daemon when it owns the store."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import click

from ingestor.answer.modes import BASES, MODES
from ingestor.cli.app import Ctx, main, run, tree_options
from ingestor.cli.factories import (
    make_query_embedder,
    make_query_service,
    reading_store,
    require_built,
    where,
)
from ingestor.read.names import shown
from ingestor.service.locking import WriterActiveError

if TYPE_CHECKING:
    from ingestor.config import Settings

log = logging.getLogger(__name__)

#: The exit status of ``adrap query``/``ask`` when nothing in the tree seems to answer (the best
#: hit scores below ``ADRAP_QUERY__MIN_SCORE``); 1 is an error, 2 a usage error.
NO_MATCH_EXIT = 3


@main.command()
@click.argument("question")
@click.option("--mode", type=click.Choice(MODES), default=None, help="Default: ADRAP_QUERY__MODE.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None, help="Context budget.")
@click.option(
    "--top-k", type=click.IntRange(min=1), default=None, help="Traversal: nodes per layer."
)
@click.option(
    "--base",
    type=click.Choice(BASES),
    default=None,
    help="postqfrap: retriever of the k0 nodes (default leaves).",
)
@click.option(
    "--k0", type=click.IntRange(min=1), default=None, help="postqfrap: nodes retrieved (20)."
)
@click.option(
    "--source",
    "source_prefix",
    default=None,
    help="Only this folder or file: relative to the tree's root, or a path on disk.",
)
@click.option(
    "--layers", default=None, help="Layer range, e.g. 0-0 for leaves only, 1- for summaries."
)
@click.option(
    "--dense-only",
    is_flag=True,
    help="Search the dense vector alone (default: hybrid with BM25, ADRAP_QUERY__HYBRID).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: hits with provenance + context.")
@tree_options()
@click.pass_obj
def query(
    ctx: Ctx,
    question: str,
    mode: str | None,
    max_tokens: int | None,
    top_k: int | None,
    base: str | None,
    k0: int | None,
    source_prefix: str | None,
    layers: str | None,
    dense_only: bool,
    as_json: bool,
) -> None:
    """Retrieve the context for QUESTION from the tree.

    Modes: collapsed (default; one filtered search over every layer), traversal (top-k per
    layer), postqfrap (k0 nodes summarised around the question into at most --max-tokens).

    \b
    Example:
      adrap query "How does Cinderella find a happy ending?" --max-tokens 1000 --json
      adrap query "Who helps Cinderella?" --mode postqfrap --base leaves --k0 20
    """
    params = request_params(question, mode, max_tokens, top_k, k0, base, source_prefix, layers)
    params["hybrid"] = "false" if dense_only else None
    out = run(ctx, lambda: answer_locally_or_by_daemon(ctx.settings, "query", params))
    _echo_answer(out, as_json)
    _hint_small_budget(ctx.settings, out, as_json)
    exit_if_no_match(out, ctx.settings.tree)


def exit_if_no_match(out: dict[str, Any], tree: str) -> None:
    """Say that nothing in the tree seems to answer, and exit 3, when the answer says so."""
    if not out.get("no_match"):
        return
    click.echo(
        f"nothing in tree {tree!r} seems to answer this: the best match scores "
        f"{out['best_score']:.2f}, "
        f"below {out['min_score']:g} (ADRAP_QUERY__MIN_SCORE); the closest passages are shown",
        err=True,
    )
    click.get_current_context().exit(NO_MATCH_EXIT)


def _hint_small_budget(s: Settings, out: dict[str, Any], as_json: bool) -> None:
    """Say why a collapsed query under a budget smaller than a node came back empty."""
    largest = max(s.chunk.max_tokens, s.summary.max_tokens)
    budget = out.get("max_tokens", largest)
    if as_json or out.get("hits") or out.get("mode") != "collapsed" or budget >= largest:
        return
    click.echo(
        f"no node fits in {budget} tokens: the fill stops at the best match that does not fit, "
        f"and nodes hold up to {largest} tokens (leaves ADRAP_CHUNK__MAX_TOKENS="
        f"{s.chunk.max_tokens}, summaries ADRAP_SUMMARY__MAX_TOKENS={s.summary.max_tokens}); "
        f"try --max-tokens {largest} or more",
        err=True,
    )


def request_params(
    question: str,
    mode: str | None,
    max_tokens: int | None,
    top_k: int | None,
    k0: int | None,
    base: str | None,
    source_prefix: str | None,
    layers: str | None,
) -> dict[str, Any]:
    """Return the parameters of ``/query`` and ``/ask`` from the command's options."""
    lo, hi = _parse_layers(layers)
    return {
        "q": question,
        "mode": mode,
        "max_tokens": max_tokens,
        "top_k": top_k,
        "k0": k0,
        "base": base,
        "source": source_prefix,
        "min_layer": lo,
        "max_layer": hi,
    }


def answer_locally_or_by_daemon(s: Settings, route: str, params: dict[str, Any]) -> dict[str, Any]:
    """Run ``route`` (query or ask) through the daemon that owns the store, else in-process.

    In-process, the store is opened under a shared reader lock, so a daemon starting meanwhile
    waits for it; a daemon that took the state dir while the model loaded is asked instead.
    """
    if params.get("source"):
        from ingestor.cli.sources import resolve_source

        params = {**params, "source": resolve_source(s, params["source"])}
    remote = _query_daemon(s, params, route)
    if remote is not None:
        return remote

    from retriever import StoreBusyError

    require_built(s)  # before loading the model: "not built" is instant and creates nothing
    embedder = make_query_embedder(s)
    deadline = time.monotonic() + s.query.daemon_wait_seconds
    while True:
        try:
            return _answer_locally(s, route, params, embedder)
        except StoreBusyError:  # another reader has it a moment, or a daemon is taking it
            remote = _query_daemon(s, params, route)
            if remote is not None:
                return remote
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _answer_locally(
    s: Settings, route: str, params: dict[str, Any], embedder: Any
) -> dict[str, Any]:
    """Answer in this process, under a shared reader lock (a daemon starting meanwhile waits)."""
    from retriever import SearchFilter

    try:
        with reading_store(s) as store:
            store.ensure_collection(embedder.dim, embedder.model_id)
            if store.count(SearchFilter(tree=s.tree)) == 0:
                raise click.ClickException(
                    f"tree {s.tree!r} is empty in {where(s)}: run `adrap build DIR` first"
                )
            service = make_query_service(s, store, embedder)
            out: dict[str, Any] = service.ask(params) if route == "ask" else service.query(params)
            return out
    except WriterActiveError:  # a daemon started while the model loaded: ask it
        remote = _query_daemon(s, params, route)
        if remote is None:
            raise
        return remote


def _query_daemon(s: Settings, params: dict[str, Any], route: str) -> dict[str, Any] | None:
    """Ask the running ``adrap watch`` for the answer when it owns the embedded store, else None.

    Its Unix socket first (the daemon answers with what this user may read); a daemon that is
    still starting is waited for (one line says so), up to ``ADRAP_QUERY__DAEMON_WAIT_SECONDS``.
    """
    from ingestor.cli.daemon_client import DaemonClient, DaemonError
    from ingestor.service.locking import read_holder

    if s.store_mode != "embedded":
        return None
    try:
        holder = _wait_for_daemon(s, read_holder)
    except PermissionError:
        holder = None  # another account's tree: only its daemon's socket answers
    client = DaemonClient.find(s, holder)
    if client is None:
        if holder is not None:
            who = f"adrap {holder.get('command', '?')} (pid {holder.get('pid', '?')})"
            raise click.ClickException(
                f"the embedded store in {where(s)} is in use by {who}; query when it has finished"
            )
        return None
    # /ask is POST only (it spends LLM tokens); /query is a GET
    method = "POST" if route == "ask" else "GET"
    deadline = time.monotonic() + s.query.daemon_wait_seconds
    while True:
        try:
            out = client.request(method, f"/{route}", params)
            break
        except DaemonError as exc:
            if exc.status == 503 and "reconciling" in exc.detail and time.monotonic() < deadline:
                _say_waiting(client.who, s)  # the daemon is starting: wait for it
                time.sleep(0.5)
                continue
            raise click.ClickException(str(exc)) from exc
        except (OSError, ValueError) as exc:
            raise click.ClickException(
                f"the embedded store is owned by {client.who}, whose endpoint {client.url} "
                f"does not answer ({exc}); check that it runs (`adrap status`)"
            ) from exc
    log.debug("answered by %s at %s", client.who, client.url)
    out["answered_by"] = "adrap watch"
    return out


def _wait_for_daemon(s: Settings, read_holder: Any) -> dict[str, Any] | None:
    """Return the lock holder; while it is a daemon not yet serving HTTP, wait (saying so once).

    Raises:
        click.ClickException: the daemon did not serve within ``ADRAP_QUERY__DAEMON_WAIT_SECONDS``.
    """
    deadline = time.monotonic() + s.query.daemon_wait_seconds
    while True:
        holder: dict[str, Any] | None = read_holder(s.state_dir)
        if (
            holder is None
            or holder.get("command") != "watch"
            or holder.get("http")
            or holder.get("socket")
        ):
            return holder
        who = f"adrap watch (pid {holder.get('pid', '?')})"
        if time.monotonic() >= deadline:
            raise click.ClickException(
                f"{who} is starting and did not serve queries within "
                f"{s.query.daemon_wait_seconds:.0f} s; check its log, or raise "
                "ADRAP_QUERY__DAEMON_WAIT_SECONDS"
            )
        _say_waiting(who, s)
        time.sleep(0.2)


_told: set[str] = set()


def _say_waiting(who: str, s: Settings) -> None:
    if who not in _told:
        _told.add(who)
        click.echo(
            f"{who} is starting; waiting up to {s.query.daemon_wait_seconds:.0f} s for it to "
            "answer...",
            err=True,
        )


def _echo_answer(out: dict[str, Any], as_json: bool) -> None:
    """Print an answer of ``answer_json``: as JSON, or one header line and the text per hit."""
    if as_json:
        click.echo(json.dumps(out, ensure_ascii=False, indent=2))
        return
    from retriever import F

    by = f" (answered by {out['answered_by']})" if out.get("answered_by") else ""
    if out["mode"] == "postqfrap":
        _echo_postqfrap(out, by)
        return
    for h in out["hits"]:
        where = _where(h)
        head = f"[{h['score']:.3f}] layer {h[F.LAYER]} · {h[F.N_TOKENS]} tok · {shown(where)}"
        click.echo(click.style(head, bold=True))
        click.echo(shown(h[F.TEXT], lines=True) + "\n")
    click.echo(
        f"{len(out['hits'])} nodes, {out['total_tokens']}/{out['max_tokens']} tokens, {out['mode']}, "
        f"{out['seconds'] * 1000:.0f} ms{by}",
        err=True,
    )


def _echo_postqfrap(out: dict[str, Any], by: str) -> None:
    for part in out["parts"]:
        click.echo(click.style(format_spans(part["spans"]), bold=True))
        click.echo(shown(part["text"], lines=True) + "\n")
    q = out["postqfrap"]
    click.echo(
        f"postqfrap({q['base']}): {q['retrieved']} nodes ({q['retrieved_tokens']} tok) -> "
        f"{out['total_tokens']}/{out['max_tokens']} tokens, {q['layers']} layers, "
        f"{q['summary_calls']} {q['summarizer']} summaries, {out['seconds'] * 1000:.0f} ms{by}",
        err=True,
    )


def format_spans(spans: list[dict[str, Any]]) -> str:
    """Return spans as ``file:start-end, file`` (a whole file has no offsets), as a terminal may
    print them (:func:`~ingestor.read.names.shown`)."""
    return shown(
        ", ".join(
            s["source"]
            if s["char_start"] is None
            else f"{s['source']}:{s['char_start']}-{s['char_end']}"
            for s in spans
        )
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


def _where(hit: dict[str, Any]) -> str:
    """Where a hit comes from: a leaf's file and span, a summary's files."""
    from retriever import F

    if hit[F.LAYER] == 0:
        place = "; ".join(x for x in (hit.get(F.LOCATOR), hit.get(F.SECTION)) if x)
        span = f"{hit[F.SOURCE]}:{hit[F.CHAR_START]}-{hit[F.CHAR_END]}"
        return f"{span} ({place})" if place else span
    if hit.get(F.SOURCES_CAPPED):
        return "more files than the tree lists per summary (cluster.max_node_sources)"
    return ", ".join(hit[F.SOURCES])
