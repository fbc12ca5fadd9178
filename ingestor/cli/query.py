"""``adrap query``: retrieve a context from the tree, through the daemon when it owns the store."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import click

from ingestor.cli.app import Ctx, main, run
from ingestor.cli.factories import make_embedder, reading_store, require_built, where
from ingestor.config import Settings
from ingestor.service.locking import WriterActiveError
from retriever import F, SearchFilter

log = logging.getLogger(__name__)


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
        daemon_params = params | {"source": source_prefix, "min_layer": lo, "max_layer": hi}
        remote = _query_daemon(s, daemon_params)
        if remote is not None:
            _echo_answer(remote, as_json, by=" (answered by adrap watch)")
            return
        require_built(s)  # before loading the model: "not built" is instant and creates nothing
        embedder = make_embedder(s)
        t0 = time.perf_counter()
        try:
            # a shared lock while the store is open: a daemon starting meanwhile waits for it
            with reading_store(s) as store:
                store.ensure_collection(embedder.dim, embedder.model_id)
                if store.count(SearchFilter(tree=s.tree)) == 0:
                    raise click.ClickException(
                        f"tree {s.tree!r} is empty in {where(s)}: run `adrap build DIR` first"
                    )
                vec = embedder.embed_query(question)
                hits = run_query(
                    store, vec, flt, mode=chosen, max_tokens=budget, top_k=top_k or s.query.top_k
                )
        except WriterActiveError:  # a daemon started while the model loaded: ask it
            remote = _query_daemon(s, daemon_params)
            if remote is None:
                raise
            _echo_answer(remote, as_json, by=" (answered by adrap watch)")
            return
        out = answer_json(question, chosen, s.tree, budget, hits, time.perf_counter() - t0)
        _echo_answer(out, as_json)

    run(ctx, body)


def _query_daemon(s: Settings, params: dict[str, Any]) -> dict[str, Any] | None:
    """Ask the running ``adrap watch`` for the answer when it owns the embedded store, else None."""
    import urllib.error
    import urllib.parse
    import urllib.request

    from ingestor.service.locking import read_holder

    if s.store_mode != "embedded":
        return None
    holder = _wait_for_daemon(s, read_holder)
    if holder is None:
        return None
    who = f"adrap {holder.get('command', '?')} (pid {holder.get('pid', '?')})"
    address = holder.get("http")
    if holder.get("command") != "watch" or not address:
        raise click.ClickException(
            f"the embedded store in {where(s)} is in use by {who}; query when it has finished"
        )
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    deadline = time.monotonic() + s.query.daemon_wait_seconds
    while True:
        try:
            with urllib.request.urlopen(f"http://{address}/query?{query}", timeout=120) as resp:
                out: dict[str, Any] = json.loads(resp.read())
            break
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            if exc.code == 503 and "reconciling" in detail and time.monotonic() < deadline:
                _say_waiting(who, s)  # the daemon is starting: wait for it
                time.sleep(0.5)
                continue
            raise click.ClickException(
                f"{who} answered {exc.code} at http://{address}/query: {detail}"
            ) from exc
        except (OSError, ValueError) as exc:
            raise click.ClickException(
                f"the embedded store is owned by {who}, whose HTTP endpoint http://{address} "
                f"does not answer ({exc}); check `curl http://{address}/healthz`"
            ) from exc
    log.debug("answered by %s at %s", who, address)
    return out


def _wait_for_daemon(s: Settings, read_holder: Any) -> dict[str, Any] | None:
    """Return the lock holder; while it is a daemon not yet serving HTTP, wait (saying so once).

    Raises:
        click.ClickException: the daemon did not serve within ``ADRAP_QUERY__DAEMON_WAIT_SECONDS``.
    """
    deadline = time.monotonic() + s.query.daemon_wait_seconds
    while True:
        holder: dict[str, Any] | None = read_holder(s.state_dir)
        if holder is None or holder.get("command") != "watch" or holder.get("http"):
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
