"""``adrap status`` and ``adrap config``: read-only views of the tree and the settings."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ingestor.cli.app import Ctx, main, run, tree_options
from ingestor.cli.factories import MODELS_DIR, STORE_DIR, where


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--offset", default=0, show_default=True, type=click.IntRange(0), help="First unread file."
)
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(0, 10_000),
    help="Skipped and stale files listed (each kind).",
)
@tree_options()
@click.pass_obj
def status(ctx: Ctx, as_json: bool, offset: int, limit: int) -> None:
    """Show the tree: documents, leaves, nodes per layer, drift, state dir and store mode,
    and the files it could not read: skipped (content) and stale (cannot be read now), with why.

    \b
    Example:
      adrap status --json
      adrap status --offset 20 --limit 100
    """
    from ingestor.pipeline.unread import UNREAD_FILE, Unread, unread_status
    from ingestor.tree.persist import load_state, state_exists
    from models_store import ModelStore

    def body() -> None:
        s = ctx.settings
        # read-only: never create the state dir (ModelStore creates its folder)
        models = (
            ModelStore(s.state_dir / MODELS_DIR) if (s.state_dir / MODELS_DIR).is_dir() else None
        )
        built = models is not None and state_exists(models, s.tree)
        out: dict[str, Any] = {
            "tree": s.tree,
            "state_dir": str(s.state_dir.resolve()),
            "store_mode": s.store_mode,
            "store": where(s),
            "built": built,
        }
        if s.store_mode == "embedded" and built:
            out["leaf_graph"] = _leaf_graph(s.state_dir / STORE_DIR)
            out["hybrid_search"] = _hybrid(s.state_dir / STORE_DIR)
        # counts only: no layer's fitted models, so neither UMAP nor scikit-learn is imported
        state = (
            load_state(models, s.tree, readonly=True, layers=False) if models and built else None
        )
        if state is not None:
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
        out |= _service_status(s)
        unread = Unread(s.state_dir / UNREAD_FILE)  # read only: written by writers
        out["unread"] = unread_status(unread, offset=offset, limit=limit)
        if as_json:
            click.echo(json.dumps(out, indent=2))
            return
        listed = out.pop("unread")
        for k, v in out.items():
            click.echo(f"{k:<28} {_shown(v)}")
        _echo_unread(listed)

    run(ctx, body)


def _shown(value: Any) -> str:
    """A value as a person reads it: ``-`` for none, ``a: 1, b: 2`` for a mapping (no Python reprs)."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) or "none"
    return str(value)


def _echo_unread(listed: dict[str, Any]) -> None:
    """Print the skipped and stale files, one line each with the reason."""
    for kind, what in (
        ("stale", "stale (exist, cannot be read now; what was read is kept)"),
        ("skipped", "skipped (content cannot be used; retried when changed)"),
    ):
        click.echo(f"{what:<28} {listed[kind]}")
        for row in listed[f"{kind}_files"]:
            since = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["since"]))
            click.echo(f"  {row['source']}  (since {since}) {row['reason']}")
        shown = listed["offset"] + len(listed[f"{kind}_files"])
        if shown < listed[kind]:
            click.echo(f"  ... {listed[kind] - shown} more: adrap status --offset {shown}")


def _leaf_graph(store: Path) -> str:
    """Whether the embedded store has the leaves' own vector (read from its config file)."""
    from retriever.edge_shard import read_index

    if read_index(store).leaf_vector:
        return "yes (leaves-only searches walk the leaves' own graph)"
    return (
        "no: the store predates it; leaves-only searches scan every leaf (index into a fresh "
        "ADRAP_STATE_DIR to get it)"
    )


def _hybrid(store: Path) -> str:
    """Whether the embedded store has the BM25 vectors of hybrid search (from its config file)."""
    from retriever.edge_shard import read_index

    if read_index(store).sparse:
        return "yes (BM25 and dense vectors, fused in one query)"
    return "no: the store predates it and searches dense only; add it with `adrap index-sparse`"


def _service_status(s: Any) -> dict[str, Any]:
    """Quarantined files and the running daemon's state (read-only; nothing is created)."""
    from ingestor.service.failures import QUARANTINE_FILE, read_quarantine
    from ingestor.service.locking import read_holder

    out: dict[str, Any] = {
        "quarantined": {
            k: v.reason for k, v in read_quarantine(s.state_dir / QUARANTINE_FILE).items()
        }
    }
    holder = read_holder(s.state_dir) if s.state_dir.is_dir() else None
    if holder and holder.get("command") == "watch" and holder.get("http"):
        import urllib.request

        req = urllib.request.Request(f"http://{holder['http']}/status")
        if s.watch.http_token is not None:
            req.add_header("Authorization", f"Bearer {s.watch.http_token.get_secret_value()}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                live = json.loads(resp.read())
        except (OSError, ValueError) as exc:
            out["daemon"] = f"pid {holder.get('pid')} does not answer ({exc})"
        else:
            out["daemon"] = f"pid {holder.get('pid')} at http://{holder['http']}"
            for key in ("pending_events", "deletions_paused", "awaiting_confirmation", "errors"):
                out[key] = live.get(key)
    return out


@main.command()
@click.option("--env", "as_env", is_flag=True, help="Print as ADRAP_* variables.")
@tree_options()
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
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def trees(ctx: Ctx, as_json: bool) -> None:
    """List the trees in this user's home for trees, where they are, and the settings files.

    A tree is opened from any directory by name: `adrap query "..." --tree NAME`.

    \b
    Example:
      adrap trees
    """
    from ingestor.cli.home import (
        LOCAL_STATE_DIR,
        data_home,
        is_state_dir,
        list_trees,
        user_settings_file,
    )
    from ingestor.service.locking import read_holder

    home = data_home()
    rows = []
    for name in list_trees(home):
        holder = read_holder(home / name)
        by = f"adrap {holder.get('command')} (pid {holder.get('pid')})" if holder else None
        rows.append({"name": name, "state_dir": str(home / name), "in_use_by": by})
    out: dict[str, Any] = {
        "home": str(home),
        "trees": rows,
        "local_state_dir": str(LOCAL_STATE_DIR.resolve())
        if is_state_dir(LOCAL_STATE_DIR)
        else None,
        "user_settings": str(user_settings_file()),
    }
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"trees in {home}:" if rows else f"no trees in {home} yet (`adrap build DIR`)")
    for row in rows:
        busy = f"  (in use by {row['in_use_by']})" if row["in_use_by"] else ""
        click.echo(f"  {row['name']:<20} {row['state_dir']}{busy}")
    if out["local_state_dir"]:
        click.echo(f"used from this directory instead: {out['local_state_dir']} (./.adrap)")
    made = "" if user_settings_file().is_file() else " (none yet)"
    click.echo(f"user settings: {out['user_settings']}{made}")
