"""``adrap watch``: the daemon that keeps the tree equal to a folder."""

from __future__ import annotations

import logging
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

import click

from ingestor.cli.app import Ctx, main, make_progress_printer, run, tree_options
from ingestor.cli.factories import make_daemon_parts, make_embedder, opened_store, writer_lock

log = logging.getLogger(__name__)


@main.command()
@click.argument("root", type=click.Path(file_okay=False, path_type=Path))
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
@click.option(
    "--confirm-deletions",
    is_flag=True,
    help="Let scans remove more than ADRAP_WATCH__MAX_DELETE_FRACTION of the documents.",
)
@tree_options()
@click.pass_obj
def watch(
    ctx: Ctx,
    root: Path,
    polling: bool | None,
    debounce: float | None,
    http_port: int | None,
    progress: bool | None,
    confirm_deletions: bool,
) -> None:
    """Keep the tree equal to the folder ROOT until SIGTERM/SIGINT (the daemon).

    Reconciles at start (first run: full build), then applies each burst of changes as one adRAP
    batch. Serves /healthz /readyz /metrics /status /query /ask on 127.0.0.1:8765 (ADRAP_WATCH__*).
    A missing or empty share pauses deletions (one away at start is waited for, the tree
    answered meanwhile); a file that fails for good is quarantined (`adrap status`, `adrap retry`).

    \b
    Example:
      adrap watch ./docs --polling --debounce 2
    """
    import signal
    import threading

    from ingestor.service.daemon import Daemon
    from ingestor.service.http import require_token_off_loopback

    def body() -> None:
        s = ctx.settings_for(creating=True)  # an unnamed tree is `default`
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
        token = w.http_token.get_secret_value() if w.http_token else None
        port = w.http_port if http_port is None else http_port
        if port >= 0:
            require_token_off_loopback(w.http_host, token)  # before anything is opened
        # The command's options override the watch settings; everything else is the settings'.
        overrides: dict[str, object] = {"http_port": port}
        if polling is not None:
            overrides["polling"] = polling
        if debounce is not None:
            overrides["debounce_seconds"] = debounce
        settings = s.model_copy(update={"watch": w.model_copy(update=overrides)})
        # Lock and open the store before anything slow (loading the model): from here on no other
        # process can open the embedded store, and queries wait for this daemon instead.
        with writer_lock(s, "watch") as lock, opened_store(s) as store:
            # The owner's token: the setting, else one made now for this run, shown as a link
            # for the owner's browser (other callers without a token are anonymous).
            owner_token = token or secrets.token_urlsafe(24)
            daemon = Daemon(
                make_daemon_parts(settings, store, make_embedder(s), owner_token),
                root,
                settings,
                state_lock=lock,
                owner_link=None if token else _show_owner_link(owner_token),
                confirm_deletions=confirm_deletions,
            )
            daemon.run(stop, show)

    run(ctx, body)


def _show_owner_link(token: str) -> Callable[[str], None]:
    """Return what prints the owner's dashboard link once HTTP serves (as Jupyter does): on the
    terminal only, never in a log (it is the owner's key)."""

    def show(address: str) -> None:
        link = f"http://{address}/dashboard#token={token}"
        if sys.stderr.isatty():
            click.echo(f"Dashboard for you (the tree's owner): {link}", err=True)
        else:
            log.info(
                "the owner's dashboard link is printed on a terminal only; set "
                "ADRAP_WATCH__HTTP_TOKEN to choose the owner's token"
            )

    return show
