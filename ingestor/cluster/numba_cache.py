"""Where numba keeps UMAP's compiled functions for a process that may not write them itself.

UMAP and pynndescent compile their kernels with numba and keep the machine code in each
package's ``__pycache__`` (written once at install, ``deploy/warm_numba.py``). numba reads it from
there only where it could also write there; elsewhere it uses the user's cache
(``$XDG_CACHE_HOME/numba``, ``~/.cache/numba``). A service account without a home has neither:
``import umap`` then failed ("cannot cache function 'rdist': no locator available") and the
daemon died at its first build. For such a process the tree's state dir keeps the cache
(``NUMBA_CACHE_DIR`` = ``<state dir>/numba-cache``), seeded with a copy of the installed one, so
nothing is compiled again (about 40 s of a core otherwise).

Nothing here imports numba: the CLI asks at start, for every command, in well under a
millisecond (what seeding needs is imported only to seed).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Final

__all__ = [
    "CACHE_DIR",
    "PACKAGES",
    "cache_subpath",
    "numba_can_cache",
    "package_dirs",
    "seed",
    "use_state_dir_cache",
]

log = logging.getLogger(__name__)

#: The packages whose functions numba compiles for adrap (UMAP and its nearest neighbours).
PACKAGES: Final = ("umap", "pynndescent")
#: The cache's folder in a tree's state dir.
CACHE_DIR: Final = "numba-cache"


def package_dirs() -> list[Path]:
    """The installed packages' folders (found, not imported)."""
    out = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            out.append(Path(spec.origin).parent)
    return out


def cache_subpath(package: Path) -> str:
    """numba's name for the cache folder of a package's files under ``NUMBA_CACHE_DIR``
    (``numba.core.caching._CacheLocator.get_suitable_cache_subpath``): a differently named
    folder only costs a compile."""
    import hashlib  # only when the cache is seeded: every command asks numba_can_cache

    path = os.path.abspath(package)
    return f"{os.path.basename(path)}_{hashlib.sha1(path.encode()).hexdigest()}"


def seed(dest: Path) -> None:
    """Copy the installed packages' compiled functions (``*.nbi``, ``*.nbc``) into ``dest`` as
    numba names them there; files already there are kept, and those this process may not read
    are left out (numba compiles those functions again)."""
    import shutil

    for package in package_dirs():
        target = dest / cache_subpath(package)
        for cached in (package / "__pycache__").glob("*.nb[ic]"):
            if (target / cached.name).exists() or not os.access(cached, os.R_OK):
                continue
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(cached, target / cached.name)


def _can_make(folder: Path) -> bool:
    """Whether ``folder`` is, or could be made, a folder this process writes in (a folder on
    the way it may not look into: no)."""
    probe = folder
    try:
        while not probe.exists():
            if probe.parent == probe:
                return False
            probe = probe.parent
        return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)
    except OSError:  # EACCES: another account's home (HOME kept by su, sudo -E)
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def numba_can_cache() -> bool:
    """Whether numba has somewhere to keep the packages' functions: ``NUMBA_CACHE_DIR``, every
    package's ``__pycache__``, or the user's cache folder."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return True
    if all(_can_make(p / "__pycache__") for p in package_dirs()):
        return True
    home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return _can_make(Path(home) / "numba")


def use_state_dir_cache(state_dir: Path, *, create: bool) -> Path | None:
    """Where numba has nowhere to keep the packages' functions, make it keep them in the tree's
    state dir (seeded from the installed cache) and return that folder; None: not needed, or no
    state dir here and ``create`` is False (nothing is created for a tree that is not there)."""
    if numba_can_cache() or not (create or _is_dir(state_dir)):
        return None
    if not _can_make(state_dir):
        return None  # another account's tree: its daemon clusters, this process asks it
    dest = state_dir / CACHE_DIR
    try:
        dest.mkdir(mode=0o700, parents=True, exist_ok=True)
        seed(dest)
    except OSError as exc:  # the command goes on; UMAP will say what it cannot do
        log.warning("cannot keep numba's cache in %s: %s", dest, exc)
        return None
    os.environ["NUMBA_CACHE_DIR"] = str(dest)
    log.debug("numba keeps UMAP's compiled functions in %s (nowhere else it may write)", dest)
    return dest
