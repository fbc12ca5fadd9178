"""``adrap retry``, ``confirm-deletions``, ``refresh``, ``relocate``: tell the daemon (or the state dir)
what to do."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ingestor.cli.app import Ctx, main, run, tree_options
from ingestor.errors import IngestError

if TYPE_CHECKING:
    from ingestor.config import Settings


def post_daemon(s: Settings, route: str) -> dict[str, Any] | None:
    """POST ``route`` to the running ``adrap watch`` of this state dir (its socket first: the
    owner's account is known by the kernel); None if none runs.

    Raises:
        IngestError: a daemon holds the state dir but does not answer, or refuses.
    """
    from ingestor.cli.daemon_client import DaemonClient, DaemonError

    client = DaemonClient.find(s)
    if client is None:
        return None
    path, _, query = route.partition("?")
    try:
        return client.request("POST", path, dict(urllib.parse.parse_qsl(query)), timeout=30)
    except DaemonError as exc:
        raise IngestError(str(exc)) from exc
    except (OSError, ValueError) as exc:
        raise IngestError(
            f"{client.who} did not answer {client.url}{path} ({exc}); check its log and "
            "ADRAP_WATCH__HTTP_TOKEN"
        ) from exc


@main.command()
@click.argument("path", required=False)
@tree_options()
@click.pass_obj
def retry(ctx: Ctx, path: str | None) -> None:
    """Try quarantined files again: all of them, or PATH (a file or folder, relative to the root).

    \b
    Example:
      adrap retry reports/q3.pdf
    """
    import urllib.parse

    from ingestor.service.failures import QUARANTINE_FILE, Quarantine
    from ingestor.service.locking import state_lock

    def body() -> None:
        s = ctx.settings
        query = "" if path is None else "?" + urllib.parse.urlencode({"path": path})
        out = post_daemon(s, "/retry" + query)
        if out is not None:
            released = out["released"]
            click.echo(f"{len(released)} files released; adrap watch applies them now")
            return
        file = s.state_dir / QUARANTINE_FILE
        if not file.exists():
            click.echo("0 files released (nothing is quarantined)")
            return
        with state_lock(s.state_dir, "retry"):
            released = Quarantine(file).release(path)
        click.echo(f"{len(released)} files released; the next `adrap watch` applies them")

    run(ctx, body)


@main.command("confirm-deletions")
@tree_options()
@click.pass_obj
def confirm_deletions(ctx: Ctx) -> None:
    """Let the running daemon remove the documents a scan found missing (over the threshold).

    \b
    Example:
      adrap confirm-deletions
    """

    def body() -> None:
        out = post_daemon(ctx.settings, "/confirm-deletions")
        if out is None:
            raise IngestError(
                "no adrap watch is running on this state dir; start it with "
                "`adrap watch DIR --confirm-deletions` to allow the deletions"
            )
        click.echo("deletions confirmed; adrap watch rescans the folder now")

    run(ctx, body)


@main.command()
@click.option(
    "--rewrite",
    is_flag=True,
    help="also rewrite every summary another summariser wrote (paid with an LLM)",
)
@tree_options()
@click.pass_obj
def refresh(ctx: Ctx, rewrite: bool) -> None:
    """Regenerate the stale summaries now (those whose children changed: the daemon pays for
    them together, see ADRAP_SUMMARY__REFRESH_SECONDS), through the running daemon if there is one.
    --rewrite: also every summary another summariser wrote (after a change of
    ADRAP_SUMMARY__BACKEND or its model; with an LLM, every such summary is paid).

    \b
    Example:
      adrap refresh
      ADRAP_SUMMARY__BACKEND=openai adrap refresh --rewrite
    """

    def body() -> None:
        s = ctx.settings
        out = post_daemon(s, "/refresh?rewrite=1" if rewrite else "/refresh")
        if out is not None:
            left = out["summaries"]["stale"]
            if out["refreshed"]:
                click.echo(f"{out['summary']}; {left} stale summaries left")
            elif out["summaries"].get("exhausted"):
                click.echo(
                    f"the summary budget is spent: {left} summaries stay stale until it refills"
                )
            else:
                click.echo(f"nothing to refresh ({left} stale summaries)")
            return
        from ingestor.cli.factories import make_embedder, make_pipeline, opened_store, writer_lock

        with writer_lock(s, "refresh"), opened_store(s) as store:  # the lock before the model
            report = make_pipeline(s, store, make_embedder(s)).refresh(rewrite=rewrite)
        click.echo(report.summary())

    run(ctx, body)


@main.command()
@click.option(
    "--all", "every", is_flag=True, help="Repair every drifted subtree the budget allows."
)
@tree_options()
@click.pass_obj
def repair(ctx: Ctx, every: bool) -> None:
    """Repair the most drifted subtree now (re-cluster its leaves, regenerate the summaries whose
    members changed) within ADRAP_ADRAP__REPAIR_TOKENS_PER_HOUR, through the running daemon if
    there is one; the daemon does it by itself when idle. A full rebuild stays `adrap rebuild`.

    \b
    Example:
      adrap repair --all
    """

    def body() -> None:
        from ingestor.cli.factories import make_embedder, make_pipeline, opened_store, writer_lock
        from ingestor.pipeline.repair import run_repairs
        from ingestor.tree.repair import RepairParams

        s = ctx.settings
        out = post_daemon(s, "/repair" + ("?all=1" if every else ""))
        if out is not None:  # the daemon repairs between its batches, by its own settings
            click.echo(out["summary"])
            return
        a = s.adrap
        params = RepairParams(a.repair_drift, a.repair_tokens_per_hour, a.repair_max_leaves)
        if params.tokens_per_hour <= 0:
            raise click.UsageError(
                "ADRAP_ADRAP__REPAIR_TOKENS_PER_HOUR is 0: repairs are off; set a budget "
                "(e.g. 50000) to repair drifted subtrees"
            )
        with writer_lock(s, "repair"), opened_store(s) as store:  # the lock before the model
            p = make_pipeline(s, store, make_embedder(s))
            done = run_repairs(
                p.context, p.require_state(recover=True), params, limit=None if every else 1
            )
        click.echo(done.summary())

    run(ctx, body)


@main.command()
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--force", is_flag=True, help="move the tree even where the folder lacks many of its files"
)
@tree_options()
@click.pass_obj
def relocate(ctx: Ctx, folder: Path, force: bool) -> None:
    """Move the tree to FOLDER, where its share is mounted now (a NAS remounted elsewhere, a
    container's /data): a sample of its files is looked for there, then the new root is
    recorded. Nothing is read, embedded or summarised. Stop `adrap watch` first.

    \b
    Example:
      adrap relocate /srv/nas/docs
    """

    def body() -> None:
        from ingestor.cli.factories import make_embedder, make_pipeline, opened_store, writer_lock
        from ingestor.pipeline.relocate import relocate as move_tree
        from ingestor.service.share import SHARE_FILE

        s = ctx.settings
        with writer_lock(s, "relocate"), opened_store(s) as store:
            moved = move_tree(
                make_pipeline(s, store, make_embedder(s)).context, folder, force=force
            )
        (s.state_dir / SHARE_FILE).unlink(missing_ok=True)  # the new mount's device is recorded
        click.echo(
            f"tree {s.tree!r} moved from {moved.old} to {moved.new} ({moved.found} of "
            f"{moved.sampled} files sampled found there); start `adrap watch {moved.new}`"
        )

    run(ctx, body)
