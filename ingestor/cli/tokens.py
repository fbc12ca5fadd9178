"""``adrap token``: named tokens, each standing for one user or group at the daemon's HTTP doors.

Kept in the tree's state dir as sha256 digests (``tokens.json``, private to the daemon's account);
a token is shown once, when it is made. A running daemon sees a change at its next request.
"""

from __future__ import annotations

import errno
import os
import time

import click

from ingestor.cli.app import Ctx, main, run, tree_options


def _book(ctx: Ctx):  # type: ignore[no-untyped-def]
    from ingestor.service.identity import TOKENS_FILE, TokenBook

    s = ctx.settings
    if not s.state_dir.is_dir():
        raise click.ClickException(
            f"no tree in {s.state_dir}: build it first (adrap build DIR / adrap watch DIR)"
        )
    path = s.state_dir / TOKENS_FILE
    if os.geteuid() not in (0, s.state_dir.stat().st_uid):  # else "no tokens", or a traceback
        raise PermissionError(errno.EACCES, "the tokens are the tree owner's", str(path))
    return TokenBook(path)


@main.group()
def token() -> None:
    """Named tokens: who an HTTP client, an MCP agent or a Qdrant client is (docs/security.md).

    A caller with no token reads world-readable files only; one with a token reads what its
    user or group may read; the owner's token (ADRAP_WATCH__HTTP_TOKEN) reads everything.

    \b
    Example:
      adrap token add hr-bot --group hr
    """


@token.command("add")
@click.argument("name")
@click.option("--user", help="The user the token stands for (a name or uid).")
@click.option("--group", help="The group the token stands for (a name or gid).")
@tree_options()
@click.pass_obj
def token_add(ctx: Ctx, name: str, user: str | None, group: str | None) -> None:
    """Make a token NAME for a user or a group, and print it (once: only its digest is kept).

    \b
    Example:
      adrap token add alice-laptop --user alice
    """
    if (user is None) == (group is None):
        raise click.UsageError("give exactly one of --user and --group")
    principal = f"user:{user}" if user is not None else f"group:{group}"

    def body() -> None:
        click.echo(_book(ctx).add(name, principal))

    run(ctx, body)


@token.command("list")
@tree_options()
@click.pass_obj
def token_list(ctx: Ctx) -> None:
    """List the tokens: name, who each stands for, when it was made (never the tokens).

    \b
    Example:
      adrap token list
    """

    def body() -> None:
        for e in _book(ctx).entries():
            made = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.created))
            click.echo(f"{e.name}\t{e.principal}\t{made}")

    run(ctx, body)


@token.command("revoke")
@click.argument("name")
@tree_options()
@click.pass_obj
def token_revoke(ctx: Ctx, name: str) -> None:
    """Revoke the token NAME (a running daemon refuses it from its next request).

    \b
    Example:
      adrap token revoke alice-laptop
    """

    def body() -> None:
        if not _book(ctx).revoke(name):
            raise click.ClickException(f"no token named {name!r} (adrap token list)")
        click.echo(f"revoked {name}")

    run(ctx, body)
