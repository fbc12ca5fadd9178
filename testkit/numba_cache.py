"""The installed packages' compiled numba functions, for a process that may not write them.

numba reads a package's cached machine code from its ``__pycache__`` only where it could also
write there; a process running as another user (``nobody``, in the tests of unprivileged readers)
falls back to its own cache, empty, and compiles UMAP's and pynndescent's functions again: about
40 s of one core, 90 s under the suite's load. A copy of the cache where that user may write,
named as numba names a user cache (``NUMBA_CACHE_DIR``), is read instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

#: The packages whose functions numba compiles for adrap (UMAP and its nearest neighbours).
PACKAGES = ("umap", "pynndescent")


def numba_cache_for(dest: Path, uid: int, gid: int) -> dict[str, str]:
    """Copy the packages' numba cache into ``dest``, owned by ``uid``/``gid``; return the
    environment that makes numba read it."""
    from numba.core.caching import UserProvidedCacheLocator

    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        package = Path(spec.origin).parent
        sub = UserProvidedCacheLocator.get_suitable_cache_subpath(str(package / "x.py"))  # type: ignore[no-untyped-call]
        target = dest / sub
        target.mkdir(parents=True, exist_ok=True)
        for cached in (package / "__pycache__").glob("*.nb[ic]"):
            shutil.copy2(cached, target / cached.name)
    for path in [dest, *dest.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)
    return {"NUMBA_CACHE_DIR": str(dest)}
