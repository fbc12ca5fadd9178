"""``--source`` of ``adrap query``/``ask``: a folder or file of the tree, however it is written.

The tree's filter takes paths relative to its root, a folder ending in ``/``. People type ``it``
for the folder ``it/``, or a path on disk (``~/notes/it``, ``../notes/it/a.md``); each becomes the
filter it means, and a filter that matches no document of the tree says so on stderr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from ingestor.cli.factories import MODELS_DIR
from ingestor.config import Settings
from ingestor.read.names import source_text
from models_store import ModelStore
from retriever.schema import tree_relative


def resolve_source(s: Settings, given: str | None) -> str | None:
    """Return the source filter ``given`` means in tree ``s.tree``: ``dir/``, ``file`` or None.

    Tried in order: a path on disk given absolute, the path relative to the tree's root (as the
    filter has always read it), then a path on disk relative to the current directory. A folder
    given without its ``/`` gets it; the root itself means no filter. When nothing matches (or the
    tree has no state here) ``given`` is returned unchanged, with a note on stderr if it matched
    nothing.
    """
    if given is None or not given.strip():
        return given
    state = _state(s)
    if state is None:
        return tree_relative(given.strip())
    root = Path(state.root)
    text = given.strip()
    on_disk = Path(text).expanduser()
    tries: list[str] = []
    if on_disk.is_absolute():
        tries += _under(root, on_disk)
    tries.append(tree_relative(text))
    if not on_disk.is_absolute():
        tries += _under(root, Path.cwd() / on_disk)
    for rel in tries:
        found = _match(state.sources, rel)
        if found is not None:
            return found or None
    click.echo(
        f"note: --source {given!r} matches no document of tree {s.tree!r} (root "
        f"{str(root)!r}); give a file or folder under the root, relative to it or as a path",
        err=True,
    )
    return given


def _state(s: Settings) -> Any:
    """Return the tree's committed state, read-only, or None (never built here, or another
    account's tree: its daemon is asked with the filter as written, relative to the root)."""
    from ingestor.pipeline import load_state, state_exists

    folder = s.state_dir / MODELS_DIR
    if not folder.is_dir():  # read-only: ModelStore would create it
        return None
    try:
        models = ModelStore(folder)
        return load_state(models, s.tree, readonly=True) if state_exists(models, s.tree) else None
    except PermissionError:
        return None


def _under(root: Path, path: Path) -> list[str]:
    """Return ``[path relative to root]`` (POSIX, ``/`` kept for a folder), or [] if outside it."""
    trailing = "/" if str(path).endswith(("/", os.sep)) else ""
    for base, p in ((root, Path(os.path.abspath(path))), (root.resolve(), path.resolve())):
        try:
            rel = source_text(p.relative_to(base).as_posix())  # a name not UTF-8: escaped
        except ValueError:
            continue
        return ["" if rel == "." else rel + trailing]
    return []


def _match(sources: Any, rel: str) -> str | None:
    """Return the filter for ``rel`` if it names documents of the tree (``""``: all), else None."""
    if rel in ("", "."):
        return ""
    if not rel.endswith("/") and rel in sources:
        return rel
    folder = rel.rstrip("/") + "/"
    return folder if sources.keys_with_prefix(folder) else None
