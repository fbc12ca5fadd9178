"""Where trees and settings files live: one home per user, so any directory finds a tree.

A tree's state dir (its embedded store, fitted models, state database, lock) is, in order:

1. ``--state-dir`` / ``ADRAP_STATE_DIR`` (also from a settings file): exactly that folder;
2. ``./.adrap`` when the current directory has one that is a state dir (the layout before
   per-user trees; a log line says it was used);
3. ``<data home>/<tree>``: ``$XDG_DATA_HOME/adrap`` or ``~/.local/share/adrap`` (Windows:
   ``%LOCALAPPDATA%\\adrap``).

The tree is ``--tree`` / ``ADRAP_TREE``; unnamed, it is ``default`` when that exists or no tree
does, the only tree when there is one, and otherwise a one-line error listing the trees.
Only the standard library is imported here: ``adrap status`` and refusals must stay fast.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

#: The folder of the current directory read as a state dir (the layout before per-user trees).
LOCAL_STATE_DIR = Path(".adrap")
#: The settings file's name, in the user's config folder and in a state dir.
SETTINGS_FILE = "adrap.env"
DEFAULT_TREE = "default"


def data_home() -> Path:
    """Return the folder holding one state dir per tree."""
    if sys.platform == "win32":  # pragma: no cover - POSIX CI
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "adrap"
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base_dir = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base_dir / "adrap"


def user_settings_file() -> Path:
    """Return the user's settings file: ``$XDG_CONFIG_HOME/adrap/adrap.env`` (may not exist)."""
    if sys.platform == "win32":  # pragma: no cover - POSIX CI
        base = os.environ.get("APPDATA") or str(Path.home() / "AppData" / "Roaming")
        return Path(base) / "adrap" / SETTINGS_FILE
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base_dir = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base_dir / "adrap" / SETTINGS_FILE


def list_trees(home: Path | None = None) -> list[str]:
    """Return the names of the trees in the data home, sorted (no home: none)."""
    folder = home or data_home()
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


#: What a folder holds once it is a state dir (its store, models, lock or settings file).
_STATE_MARKS = ("qdrant", "models", "adrap.lock", SETTINGS_FILE, ".env")


def is_state_dir(folder: Path) -> bool:
    """Whether ``folder`` is a state dir (not, say, a folder of state dirs such as ``.adrap/x``)."""
    return folder.is_dir() and any((folder / mark).exists() for mark in _STATE_MARKS)


@dataclass(frozen=True)
class TreeHome:
    """The state dir and tree a command works on, and why (for the log and ``adrap trees``)."""

    state_dir: Path
    tree: str
    #: ``explicit`` (--state-dir / ADRAP_STATE_DIR), ``local`` (./.adrap) or ``home``.
    origin: str


def locate(state_dir: str | None, tree: str | None, *, creating: bool = False) -> TreeHome:
    """Return the state dir and tree for the given ``--state-dir`` and ``--tree`` (None: unset).

    Args:
        state_dir: an explicit state dir, or None.
        tree: an explicit tree name, or None.
        creating: the command may create the tree (``build``, ``watch``): an unnamed tree is
            ``default`` even when other trees exist.

    Raises:
        TreeNameError: no tree is named and the data home holds several, none ``default``.
    """
    if state_dir:
        return TreeHome(Path(state_dir).expanduser(), tree or DEFAULT_TREE, "explicit")
    if is_state_dir(LOCAL_STATE_DIR):
        return TreeHome(LOCAL_STATE_DIR, tree or DEFAULT_TREE, "local")
    home = data_home()
    if tree is None:
        trees = list_trees(home)
        if creating or not trees or DEFAULT_TREE in trees:
            tree = DEFAULT_TREE
        elif len(trees) == 1:
            tree = trees[0]
        else:
            raise TreeNameError(
                f"several trees in {home} ({', '.join(trees)}) and none named; pass --tree NAME "
                f"(e.g. --tree {trees[0]}) or set ADRAP_TREE"
            )
    return TreeHome(home / tree, tree, "home")


class TreeNameError(ValueError):
    """No tree was named and several exist: the command does not guess."""
