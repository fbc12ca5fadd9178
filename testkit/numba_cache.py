"""The installed packages' compiled numba functions, for a process that may not write them.

numba reads a package's cached machine code from its ``__pycache__`` only where it could also
write there; a process running as another user (``nobody``, in the tests of unprivileged readers)
falls back to its own cache, empty, and compiles UMAP's and pynndescent's functions again: about
40 s of one core, 90 s under the suite's load. A copy of the cache where that user may write,
named as numba names a user cache (``NUMBA_CACHE_DIR``), is read instead (the product does the
same for an account with nowhere to write it: :mod:`ingestor.cluster.numba_cache`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ingestor.cluster.numba_cache import seed


def numba_cache_for(dest: Path, uid: int, gid: int) -> dict[str, str]:
    """Copy the packages' numba cache into ``dest``, owned by ``uid``/``gid``; return the
    environment that makes numba read it."""
    dest.mkdir(parents=True, exist_ok=True)
    seed(dest)
    for path in [dest, *dest.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)
    return {"NUMBA_CACHE_DIR": str(dest)}
