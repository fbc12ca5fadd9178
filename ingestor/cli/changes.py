"""``adrap changes``: what changed in the folder, through the daemon when one runs (it shows each
user what they may read), else from the tree's state database (its owner's view)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import click

from ingestor.cli.app import Ctx, main, run, tree_options

if TYPE_CHECKING:
    from ingestor.config import Settings

#: Files a record lists on the terminal (``--json`` has them all).
SHOWN_FILES = 8


@main.command()
@click.option(
    "--since",
    default="7d",
    show_default=True,
    help="How far back: a duration (90m, 36h, 2d, 1w), a day (today, yesterday, monday), an ISO "
    "date or date-time, epoch seconds.",
)
@click.option("--until", default=None, help="Up to this time (same forms as --since).")
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(1, 1000), help="Records at most."
)
@click.option(
    "--digest", is_flag=True, help="Also print the summaries those changes regenerated, numbered."
)
@click.option(
    "--llm", is_flag=True, help="With --digest: an LLM answer written from them (spends tokens)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@tree_options()
@click.pass_obj
def changes(
    ctx: Ctx,
    since: str,
    until: str | None,
    limit: int,
    digest: bool,
    llm: bool,
    as_json: bool,
) -> None:
    """Show what changed in the folder: each build, update, refresh or permissions change, newest
    first, with the files it added, edited or removed and the summaries it regenerated.

    \b
    Example:
      adrap changes --since 2d
      adrap changes --since 2026-11-23 --digest
    """
    params: dict[str, Any] = {"since": since, "until": until, "limit": limit}
    if digest or llm:
        params["digest"] = "llm" if llm else "1"
    out = run(ctx, lambda: read_changes(ctx.settings, params))
    if as_json:
        click.echo(json.dumps(out, ensure_ascii=False, indent=2))
        return
    _echo(out)


def read_changes(s: Settings, params: dict[str, Any]) -> dict[str, Any]:
    """Ask the running daemon (it knows who asks), else read the state database here."""
    from ingestor.cli.daemon_client import DaemonClient, DaemonError

    client = DaemonClient.find(s) if s.store_mode == "embedded" else None
    if client is not None:
        method = "POST" if params.get("digest") == "llm" else "GET"
        try:
            out = client.request(method, "/changes", params, timeout=600)
        except DaemonError as exc:
            raise click.ClickException(str(exc)) from exc
        except (OSError, ValueError) as exc:
            raise click.ClickException(
                f"{client.who} does not answer at {client.url} ({exc}); check that it runs"
            ) from exc
        out["answered_by"] = "adrap watch"
        return out
    return _read_locally(s, params)


def _read_locally(s: Settings, params: dict[str, Any]) -> dict[str, Any]:
    from ingestor.answer.changes import ChangeFeed, state_rows
    from ingestor.cli.factories import make_summarizer, reading_store, require_built, state_db

    require_built(s)
    rows = state_rows(state_db(s))
    if not params.get("digest"):
        return ChangeFeed(rows, s.tree).changes(params)
    llm = None
    if params["digest"] == "llm":
        if s.summary.backend != "openai":
            raise click.ClickException(
                "--llm needs an LLM: set ADRAP_SUMMARY__BACKEND=openai and its endpoint; "
                "--digest alone prints the summaries that changed"
            )
        llm = make_summarizer(s)
    with reading_store(s) as store:
        limit = s.summary.openai.max_input_tokens if llm is not None else None
        most = s.answer.max_tokens
        feed = ChangeFeed(rows, s.tree, store=store, llm=llm, input_limit=limit, answer_tokens=most)
        return feed.changes(params)


#: A file's mark in a record's line: added, edited, removed, new permissions (moved: ``a -> b``).
MARKS: Final = {"added": "+", "edited": "~", "removed": "-", "permissions": "!"}


def _file_line(f: dict[str, Any], shown: Callable[[str], str]) -> str:
    if f["action"] == "moved":
        return f"{shown(f['from'])} -> {shown(f['source'])}"
    return f"{MARKS.get(f['action'], '?')}{shown(f['source'])}"


def _echo(out: dict[str, Any]) -> None:
    from ingestor.read.names import shown
    from retriever import F

    records = out["records"]
    click.echo(f"{len(records)} change(s) in tree {out[F.TREE]!r} since {out['since']}")
    for r in records:
        at = dt.datetime.fromisoformat(r["at_iso"]).astimezone().strftime("%Y-%m-%d %H:%M:%S")
        files = r["files"]
        listed = " ".join(_file_line(f, shown) for f in files[:SHOWN_FILES])
        more = len(files) - SHOWN_FILES + r.get("files_omitted", 0)
        counts = []
        if r.get("updates", 1) > 1:  # merged: a file saved again and again (changelog)
            first = dt.datetime.fromtimestamp(r["first_at"]).astimezone().strftime("%H:%M:%S")
            counts.append(f"{r['updates']} updates since {first}")
        if r.get("leaves_added") or r.get("leaves_removed"):
            counts.append(f"leaves +{r['leaves_added']} -{r['leaves_removed']}")
        if r["summaries"]:
            counts.append(f"{len(r['summaries']) + r.get('summaries_omitted', 0)} summaries")
        click.echo(
            f"{at}  {r['kind']:<11} {listed or shown(r.get('detail', ''))}"
            f"{f' (+{more} more)' if more > 0 else ''}"
            f"{'  (' + '; '.join(counts) + ')' if counts else ''}"
        )
    dig = out.get("digest")
    if dig:
        if dig.get("answer"):
            click.echo("\n" + shown(dig["answer"], lines=True))
        click.echo(f"\nWhat the changed parts are about now ({len(dig['parts'])} parts):")
        for p in dig["parts"]:
            layer = p.get(F.LAYER, 0)
            where = ", ".join(p.get(F.SOURCES) or ([p[F.FILE]] if F.FILE in p else []))
            where = shown(where[:200])
            click.echo(f"[{p['n']}] (layer {layer}{'; ' + where if where else ''})")
            click.echo(f"    {shown(p[F.TEXT], lines=True)}")
