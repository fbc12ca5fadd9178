"""UMAP for the clusterer: an exact cosine kNN index, a repeatable fit, a lazy import with numba's
cache, quiet calls.

The exact kNN replaces UMAP's NNDescent: on the layer sizes of a tree it is faster and exact, and
its ``query`` is all ``UMAP.transform`` needs to place new points (adRAP calls UMAP's own
``transform``; a re-implementation on UMAP's internals saved ~0.8 ms per call, ~7-15 ms of a
~60-110 ms update at 2.7k leaves, and was dropped for that reason).

:func:`fit_umap` gives UMAP its start as ``init=`` (an array), the spectral start UMAP would
compute, made repeatable (:mod:`ingestor.cluster.spectral_init`); nothing of umap is patched.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.spectral_init import spectral_init
from models_store import library_imports, rebind_submodules

log = logging.getLogger(__name__)

#: Rows per block of the kNN distance matrix (bounds memory to block x n_train floats).
_KNN_BLOCK = 1024
#: A row whose length is this close to 1 is taken as unit length (a float32 row an embedder
#: normalised is within ~1e-6); the cosine kNN above reads dot products as cosines.
UNIT_TOLERANCE: Final = 1e-5
#: Rows per block when :func:`unit_rows` measures lengths in float64.
_NORM_BLOCK = 8192
#: UMAP warns that our index is not an NNDescent; its ``transform`` only needs ``query``.
_DUCK_INDEX_WARNING = "precomputed_knn[2] (knn_search_index) is not an NNDescent object"
_SPECTRAL_FALLBACK_WARNING = "Spectral initialisation failed"


class ExactCosineIndex:
    """Exact cosine kNN over L2-normalised rows, with the ``query`` UMAP's ``transform`` calls."""

    # Read by UMAP's transform to pick an NNDescent search epsilon, which exact search ignores.
    _angular_trees = True

    def __init__(self, data: NDArray[np.float32]) -> None:
        self.data = data

    def __getstate__(self) -> dict[str, Any]:
        # The data is also the UMAP's _raw_data, and joblib would store it twice;
        # TreeClusterer.__setstate__ points the index back at it.
        return {}

    def query(
        self, X: NDArray[np.float32], k: int, epsilon: float = 0.0, *, exclude_self: bool = False
    ) -> tuple[NDArray[np.int32], NDArray[np.float32]]:
        """Return the indices and cosine distances, (n, k) each, of the k nearest rows of data."""
        del epsilon  # an NNDescent search parameter
        n = len(X)
        indices = np.empty((n, k), dtype=np.int32)
        dists = np.empty((n, k), dtype=np.float32)
        for start in range(0, n, _KNN_BLOCK):
            d = 1.0 - X[start : start + _KNN_BLOCK] @ self.data.T
            rows = np.arange(len(d))
            if exclude_self:  # a point is its own first neighbour, even among duplicates
                d[rows, rows + start] = -1.0
            part = np.argpartition(d, k - 1, axis=1)[:, :k]
            pd = np.take_along_axis(d, part, axis=1)
            order = np.argsort(pd, axis=1, kind="stable")
            indices[start : start + len(d)] = np.take_along_axis(part, order, axis=1)
            dists[start : start + len(d)] = np.maximum(np.take_along_axis(pd, order, axis=1), 0.0)
        return indices, dists


@functools.cache
def load_umap() -> Any:
    """Import umap (≈2 s, so only when clustering runs) and enable numba's cache for its kernels."""
    with library_imports():  # umap/__init__'s notice that ParametricUMAP is unavailable
        import umap
        import umap.layouts
        import umap.spectral
        import umap.umap_
        import umap.utils
    rebind_submodules("umap")  # an earlier import that failed half-way left them unbound
    from numba.core.registry import CPUDispatcher

    for module in (umap.umap_, umap.layouts, umap.utils):
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__.startswith("umap"):
                try:
                    obj.enable_caching()
                except RuntimeError as exc:  # no writable cache location: compile as usual
                    log.debug("numba cache unavailable for umap %s: %s", name, exc)
    return umap


@contextlib.contextmanager
def umap_call(what: str, *, serial: bool) -> Iterator[None]:
    """Around a UMAP fit or transform: drop the warnings we expect, log one, re-issue the rest.

    ``serial`` runs numba's parallel kernels on one thread (this thread only): UMAP's fit does so
    for seeded runs, but its transform keeps numba's default, and on a busy 2-core machine the
    OpenMP hand-off cost ~20 ms per kernel call, 60 ms to place a single point.
    """
    import numba

    threads = numba.get_num_threads()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if serial:
            numba.set_num_threads(1)
        try:
            yield
        finally:
            numba.set_num_threads(threads)
    for w in caught:
        message = str(w.message)
        if message.startswith(_DUCK_INDEX_WARNING):
            continue
        if message.startswith(_SPECTRAL_FALLBACK_WARNING):
            # UMAP then draws a random init from its own seeded generator: still reproducible.
            log.info("%s: spectral init failed (degenerate input); UMAP used random init", what)
            continue
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def fit_umap(
    X: NDArray[np.float32],
    *,
    n_neighbors: int,
    n_components: int,
    n_epochs: int | None,
    random_state: int | None,
    what: str,
) -> Any:
    """Return a cosine UMAP fitted on the unit rows of ``X``, on their exact kNN graph, from a
    repeatable spectral start (:func:`~ingestor.cluster.spectral_init.spectral_init`).

    The caller keeps ``2 <= n_neighbors < len(X)`` and ``n_components + 1 < len(X)`` (the
    spectral start's eigenvectors). ``random_state`` None runs UMAP's parallel layout, not
    reproducibly; ``what`` names the fit in the log.
    """
    from sklearn.utils import check_random_state

    umap = load_umap()
    X = np.ascontiguousarray(X, dtype=np.float32)
    index = ExactCosineIndex(X)
    indices, dists = index.query(X, n_neighbors, exclude_self=True)
    far = dists >= umap.umap_.DISCONNECTION_DISTANCES["cosine"]  # UMAP cuts these edges
    indices[far], dists[far] = -1, np.inf
    # An int seeds a fresh generator (None: numpy's global one). The start draws from it what
    # UMAP's own spectral start would, and UMAP's fit goes on with it: the same fit as ever.
    rng = check_random_state(random_state)
    with umap_call(what, serial=random_state is not None):
        graph = umap.umap_.fuzzy_simplicial_set(
            X, n_neighbors, rng, "cosine", knn_indices=indices, knn_dists=dists
        )[0]
        reducer = umap.UMAP(
            n_neighbors=n_neighbors,
            n_components=n_components,
            metric="cosine",
            n_epochs=n_epochs,
            init=spectral_init(X, graph, n_components, rng, n_epochs),
            random_state=None if random_state is None else rng,
            n_jobs=1 if random_state is not None else -1,  # seeded UMAP is serial anyway
            precomputed_knn=(indices, dists, index),
        )
        reducer.fit(X)
    # Stored as given: the seed, not the generator the fit used up; "spectral", not the
    # (n, c) start, which UMAP no longer needs and every pickle would carry.
    reducer.set_params(random_state=random_state, init="spectral")
    return slim(reducer)


def slim(reducer: Any) -> Any:
    """Drop what only the fit read: its fuzzy graph and kNN arrays (~250 bytes a training row,
    ~14 % of a pickled local model). ``transform`` (adRAP's placements) reads the search index,
    the training rows and the embedding. Returns ``reducer``."""
    index = reducer.precomputed_knn[2]
    reducer.graph_ = None
    reducer.knn_indices = reducer.knn_dists = None
    reducer._knn_indices = reducer._knn_dists = None
    reducer.set_params(precomputed_knn=(None, None, index))
    return reducer


def unit_rows(X: NDArray[np.floating]) -> NDArray[np.float32]:
    """Return ``X`` as contiguous float32 rows of unit length, refusing empty or non-finite input.

    Rows already of unit length (within :data:`UNIT_TOLERANCE`: what an embedder hands back) are
    taken as they are, the others divided by their norm; ``X`` itself comes back when no row needs
    it (a layer's whole matrix: a copy of it was 1.5 KB a leaf for the whole fit). Each row's
    outcome depends on that row only, so a row transformed later meets its training copy bit
    for bit.
    """
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2 or len(X) == 0:
        raise ValueError(f"expected a non-empty (n, d) array of embeddings, got shape {X.shape}")
    norms = np.empty(len(X))
    for start in range(0, len(X), _NORM_BLOCK):  # float64, a block at a time: no (n, d) copy
        block = X[start : start + _NORM_BLOCK].astype(np.float64)
        norms[start : start + len(block)] = np.sqrt(np.einsum("ij,ij->i", block, block))
    if not np.isfinite(norms).all():
        raise ValueError("embeddings contain NaN or infinity")
    off = np.abs(norms - 1.0) > UNIT_TOLERANCE
    if not off.any():
        return np.ascontiguousarray(X)
    out = np.array(X, dtype=np.float32, order="C")
    out[off] /= np.maximum(norms[off], 1e-12)[:, None]
    return out
