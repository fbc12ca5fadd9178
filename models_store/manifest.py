"""The manifest written beside every stored object: what wrote it, with which libraries."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import time
from typing import Any

from pydantic import BaseModel, ConfigDict

FORMAT_VERSION = 1

#: Libraries whose objects the fitted models pickle (UMAP, GMMs, arrays), recorded in every manifest.
#: A state written with other versions opens: a minor release reads its predecessors' pickles, and
#: a model blob that cannot be read raises :class:`~models_store.errors.IncompatibleModelError`,
#: which the ingestor answers with a refit from the stored vectors (the tree, its summaries and
#: the summary cache are rows, not pickles of these libraries).
PINNED_LIBRARIES = ("numpy", "scikit-learn", "umap-learn")


def library_versions() -> dict[str, str]:
    """Return the versions of the pinned libraries this process runs (absent ones left out)."""
    return dict(_library_versions())


@functools.cache
def _library_versions() -> dict[str, str]:
    # Read once per process: the modules a process has imported do not change with what is
    # installed after it started, and reading the metadata cost ~5 ms at every state commit.
    out = {"python": platform.python_version()}
    for dist in PINNED_LIBRARIES:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def major_minor(version: str) -> str:
    """Return ``"1.5"`` for ``"1.5.2"``."""
    return ".".join(version.split(".")[:2])


class Manifest(BaseModel):
    """manifest.json of one stored version."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = FORMAT_VERSION
    name: str
    version: int
    created_at: float
    sha256: str
    size: int
    libraries: dict[str, str]
    extra: dict[str, Any] = {}

    @classmethod
    def new(
        cls, name: str, version: int, sha256: str, size: int, extra: dict[str, Any]
    ) -> Manifest:
        return cls(
            name=name,
            version=version,
            created_at=time.time(),
            sha256=sha256,
            size=size,
            libraries=library_versions(),
            extra=extra,
        )

    def library_changes(self) -> list[str]:
        """Return one line per library whose major.minor differs from the running one."""
        return library_changes(self.libraries)


def library_changes(stored: dict[str, str]) -> list[str]:
    """Return one line per pinned library whose major.minor in ``stored`` differs from now."""
    now = library_versions()
    return [
        f"{lib} {was} (stored) vs {now[lib]} (installed)"
        for lib, was in stored.items()
        if lib in PINNED_LIBRARIES and lib in now and major_minor(now[lib]) != major_minor(was)
    ]
