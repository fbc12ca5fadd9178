"""Unpickling fitted models whatever warnings filter the process runs under.

umap-learn's package init warns (``ImportWarning``) that TensorFlow is not installed. Where
warnings are errors (``python -W error``, ``PYTHONWARNINGS=error``, pytest's ``filterwarnings =
error``), unpickling a UMAP imported ``umap`` through that warning, which then aborted the
package's init half-way: the model read as incompatible and was refitted for nothing, and the
``umap`` imported next no longer had its submodules as attributes (they stayed in
``sys.modules`` from the first try, so Python did not bind them again): ``module 'umap' has no
attribute 'umap_'`` at the next clustering. Every import of the clustering libraries goes
through :func:`library_imports`.
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import warnings
from collections.abc import Iterator
from typing import IO, Final

__all__ = ["LIBRARY_IMPORT_WARNINGS", "library_imports", "rebind_submodules", "unpickle"]

#: (message, category) of the warnings a library's import gives that say nothing to adrap.
LIBRARY_IMPORT_WARNINGS: Final = (
    ("Tensorflow not installed", ImportWarning),  # umap/__init__: ParametricUMAP, never used
)


@contextlib.contextmanager
def library_imports() -> Iterator[None]:
    """Within: the clustering libraries' import-time notices are not warnings, so no filter
    turns them into errors."""
    with warnings.catch_warnings():
        for message, category in LIBRARY_IMPORT_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield


def rebind_submodules(package: str) -> None:
    """Bind each imported submodule of ``package`` as its attribute where a failed earlier
    import of the package left it unbound (see the module's docstring)."""
    parent = sys.modules.get(package)
    if parent is None:
        return
    prefix = package + "."
    for name, module in list(sys.modules.items()):
        child = name[len(prefix) :]
        if name.startswith(prefix) and "." not in child and not hasattr(parent, child):
            setattr(parent, child, module)


def unpickle(source: bytes | IO[bytes]) -> object:
    """``pickle.loads`` (bytes) or ``pickle.load`` (a binary file), within
    :func:`library_imports`."""
    with library_imports():
        if isinstance(source, bytes | bytearray | memoryview):
            return pickle.loads(source)
        return pickle.load(source)
