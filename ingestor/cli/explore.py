"""``adrap explore``: the dashboard page of a tree that is not being watched, as one HTML file.

Who may read what (issue 53): the command opens the tree's store itself, which only an account
the OS lets open the state dir can do (the state dir is 0711 and its files private to the
daemon's account); that permission is what makes it read every node as the tree's owner
(unrestricted), the same as the daemon's own account. It serves nothing over the network: it
writes one file, readable by its writer alone (0600), since it holds text of files other users
of the share may not be allowed to read.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ingestor.cli.app import Ctx, main, run, tree_options
from ingestor.cli.factories import MODELS_DIR, reading_store
from ingestor.service.locking import WriterActiveError

if TYPE_CHECKING:
    from ingestor.config import Settings

if TYPE_CHECKING:
    from ingestor.service.dashboard.picture import Touched

log = logging.getLogger(__name__)


@main.command()
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=Path("tree.html"),
    show_default=True,
    help="The HTML file written.",
)
@click.option(
    "--max-nodes",
    type=click.IntRange(min=1),
    default=None,
    help="Nodes embedded at most (default 5000): the top layers whole, then their children up "
    "to the cap.",
)
@tree_options()
@click.pass_obj
def explore(ctx: Ctx, output: Path, max_nodes: int | None) -> None:
    """Write the tree's dashboard page as one self-contained HTML file (opens offline).

    The same page as the daemon's /dashboard, with the tree embedded: the picture of the whole
    tree (icicle and 2-D maps), layers from the top, each node's text, sources, parents and
    children. Search is off in the file (it needs the embedding
    model); a watched tree is explored live at http://HOST:PORT/dashboard instead.

    It shows every node: whoever can open the tree's state dir reads it all, as its owner. The
    file holds text of every indexed file, so it is written readable by you alone (0600).

    \b
    Example:
      adrap explore -o tree.html --max-nodes 2000 && xdg-open tree.html
    """
    from ingestor.service.dashboard.export import DEFAULT_MAX_NODES, export_data
    from ingestor.service.dashboard.page import render_page
    from ingestor.service.dashboard.pictures import whole_picture
    from ingestor.service.dashboard.view import TreeView

    def body() -> None:
        s = ctx.settings
        t0 = time.perf_counter()
        try:
            with reading_store(s) as store:
                updates, touched = _snapshot(s)
                data = export_data(
                    TreeView(store, s.tree),  # unrestricted: the OS let us open the state
                    max_nodes=max_nodes or DEFAULT_MAX_NODES,
                    updates=updates,
                )
                if data["layers"]:
                    data["picture"] = whole_picture(store, s.tree, touched)
        except WriterActiveError as exc:
            raise click.ClickException(_in_use(s, exc.holder)) from exc
        if not data["layers"]:
            raise click.ClickException(
                f"tree {s.tree!r} has no nodes in this store; build it first (`adrap build DIR`) "
                "or name another tree with --tree"
            )
        html = render_page(data)
        _write_private(output, html)
        click.echo(
            f"wrote {output} ({len(html.encode()) / 1e6:.1f} MB, {len(data['nodes'])} nodes"
            f"{', truncated by --max-nodes' if data['truncated'] else ''}) in "
            f"{time.perf_counter() - t0:.1f} s",
            err=True,
        )

    run(ctx, body)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner alone (0600; an existing file too, e.g.
    one an earlier version wrote 0644: whoever wants to share it chmods it afterwards)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)  # before the text is in it
        f.write(text)


def _in_use(s: Settings, holder: dict[str, Any]) -> str:
    """Say who holds the tree's state dir and where to see it instead (not "run it again").

    The lock's own message says "since a moment ago", true only of a writer that appeared while
    this command started; a daemon holds it for as long as it runs.
    """
    who = f"adrap {holder.get('command', '?')} (pid {holder.get('pid', '?')})"
    http = holder.get("http")
    if holder.get("command") == "watch":
        live = f"serves this page live at http://{http}/dashboard" if http else "is starting"
        return f"tree {s.tree!r} in {str(s.state_dir)!r} is watched by {who}, which {live}"
    return f"state dir {str(s.state_dir)!r} is in use by {who}; run `adrap explore` when it ends"


def _snapshot(s: Settings) -> tuple[dict[str, Any], Touched]:
    """What the page shows under "Updates" for an unwatched tree (the state's counters), and
    the nodes its picture marks as updated.

    The state records when the tree was last fully built, not which nodes each later update
    wrote: the picture marks the nodes written since that build (every node carries the time it
    was written), which are the last update's when only one update followed the build.
    """
    from ingestor.pipeline import load_state, state_exists
    from ingestor.pipeline.unread import UNREAD_FILE, Unread, unread_status
    from ingestor.service.dashboard.picture import Touched
    from ingestor.service.failures import QUARANTINE_FILE, read_quarantine
    from models_store import ModelStore

    out: dict[str, Any] = {
        "note": "Not watched: this is the tree as last built or updated.",
        "quarantined": {
            k: {"reason": v.reason, "since": v.at}
            for k, v in read_quarantine(s.state_dir / QUARANTINE_FILE).items()
        },
        "updates": [],
        "unread": unread_status(Unread(s.state_dir / UNREAD_FILE)),
    }
    folder = s.state_dir / MODELS_DIR
    models = ModelStore(folder) if folder.is_dir() else None
    state = (
        load_state(models, s.tree, readonly=True)
        if models and state_exists(models, s.tree)
        else None
    )
    touched = Touched(None, "no tree state found: updates cannot be marked")
    if state is not None:
        built = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(state.built_at))
        changed = state.added_since_build + state.removed_since_build
        touched = (
            Touched(state.built_at, f"nodes written since the last full build ({built})")
            if changed
            else Touched(None, f"no update since the last full build ({built})")
        )
        out["documents"] = len(state.sources)
        out["state"] = {
            "root": state.root,
            "built_at": built,
            "generation": state.generation,
            "leaves_added_since_build": state.added_since_build,
            "leaves_removed_since_build": state.removed_since_build,
            "embed_model": state.embed_model,
        }
    return out, touched
