"""UMAP for the clusterer: an exact cosine kNN index, a lazy import with numba's cache, quiet calls,
and UMAP's ``transform`` without its per-call overhead.

The exact kNN replaces UMAP's NNDescent: on the layer sizes of a tree it is faster and exact, and
its ``query`` is all UMAP's ``transform`` needs to place new points.

:func:`transform` computes what ``UMAP.transform`` computes for the clusterer's models, step for
step (kNN, fuzzy memberships, the weighted-mean start, the same SGD epochs with the same seeds),
and leaves out what it pays on every call: input re-validation and hashing, a fresh seeded
generator, sparse-matrix round trips, a Python loop over the new rows for the start, and above all
one Python-to-numba call per epoch (~40 us each, ~66 epochs a call). adRAP transforms a handful of
points several times per update (bench/update.py at 265k leaves: ~17 calls per update, ~8 ms
each, ~0.1 s of an update's CPU); here the epochs run in one compiled loop.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

log = logging.getLogger(__name__)

#: Rows per block of the kNN distance matrix (bounds memory to block x n_train floats).
_KNN_BLOCK = 1024
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
    with warnings.catch_warnings():
        # umap/__init__ announces that ParametricUMAP (TensorFlow) is unavailable; we never use it.
        warnings.filterwarnings(
            "ignore", message="Tensorflow not installed", category=ImportWarning
        )
        import umap
    import umap.layouts
    import umap.spectral
    import umap.umap_
    import umap.utils
    from numba.core.registry import CPUDispatcher

    if not getattr(umap.spectral._spectral_layout, "signs_fixed", False):
        umap.spectral._spectral_layout = _fixed_signs(umap.spectral._spectral_layout)

    for module in (umap.umap_, umap.layouts, umap.utils):
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__.startswith("umap"):
                try:
                    obj.enable_caching()
                except RuntimeError as exc:  # no writable cache location: compile as usual
                    log.debug("numba cache unavailable for umap %s: %s", name, exc)
    return umap


#: Graphs up to this many vertices get their spectral initialisation from a dense eigensolver.
DENSE_SPECTRAL_MAX = 256


def _fixed_signs(layout: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap UMAP's spectral initialisation so that the same graph always gets the same init.

    ARPACK's ``eigsh`` (UMAP's solver) is not repeatable: on the same matrix it returned each
    eigenvector with either sign, and near-equal eigenvalues' vectors mixed differently, from
    call to call, so a seeded UMAP of 13 points gave one of two layouts at random (and a group
    refit, one of two trees). Graphs of at most :data:`DENSE_SPECTRAL_MAX` vertices are solved
    by LAPACK's dense ``eigh`` instead (the same eigenvectors of the same normalised Laplacian,
    a few ms); every column is then flipped so that its entry of largest magnitude is positive.
    """

    @functools.wraps(layout)
    def signed(data: Any, graph: Any, dim: int, *args: Any, **kwargs: Any) -> Any:
        out = _dense_spectral(graph, dim)
        if out is None:
            out = layout(data, graph, dim, *args, **kwargs)
        if not isinstance(out, np.ndarray) or out.ndim != 2 or len(out) == 0:
            return out
        top = out[np.argmax(np.abs(out), axis=0), np.arange(out.shape[1])]
        return out * np.where(top < 0, -1.0, 1.0).astype(out.dtype)

    signed.signs_fixed = True  # type: ignore[attr-defined]
    return signed


def _dense_spectral(graph: Any, dim: int) -> NDArray[np.float64] | None:
    """UMAP's spectral layout (eigenvectors 2..dim+1 of the symmetric normalised Laplacian) by
    a dense solver, for a small connected graph; None where UMAP's own must run."""
    n = graph.shape[0]
    if n > DENSE_SPECTRAL_MAX or dim + 1 >= n:
        return None
    G = np.asarray(graph.toarray() if hasattr(graph, "toarray") else graph, dtype=np.float64)
    degree = G.sum(axis=0)
    if not np.all(degree > 0):
        return None
    scale = 1.0 / np.sqrt(degree)
    laplacian = np.eye(n) - scale[:, None] * G * scale[None, :]
    _, vectors = np.linalg.eigh((laplacian + laplacian.T) / 2)
    return np.ascontiguousarray(vectors[:, 1 : dim + 1])


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


def transform(reducer: Any, X: NDArray[np.float32]) -> NDArray[np.float32]:
    """Return ``reducer.transform(X)`` (float32) for a fitted UMAP, computed without its overhead.

    Models this module does not know how to follow (another metric or output metric, densMAP, a
    small-data fit without a search index, a graph transform mode, unseeded parallel layouts) go
    through ``reducer.transform`` itself, as does the transform of the training data.
    """
    if not _lean(reducer) or len(X) == 0:
        return np.asarray(reducer.transform(X), dtype=np.float32)
    X = np.ascontiguousarray(X, dtype=np.float32)
    raw = reducer._raw_data
    if X.shape == raw.shape and np.array_equal(X, raw):  # UMAP returns the fit's own embedding
        return np.asarray(reducer.embedding_, dtype=np.float32)
    umap = load_umap()
    indices, dists = reducer._knn_search_index.query(X, reducer.n_neighbors)
    dists = dists.astype(np.float32, order="C")
    indices[dists >= reducer._disconnection_distance] = -1
    sigmas, rhos = umap.umap_.smooth_knn_dist(
        dists,
        float(reducer._n_neighbors),
        local_connectivity=float(max(0.0, reducer.local_connectivity - 1.0)),
    )
    rows, cols, vals, _ = umap.umap_.compute_membership_strengths(
        indices, dists, sigmas, rhos, bipartite=True
    )
    tail_embedding = np.ascontiguousarray(reducer.embedding_, dtype=np.float32)
    embedding = _start(indices, vals.reshape(indices.shape), tail_embedding)
    n_epochs = (  # UMAP's rule for a transform
        int(reducer.n_epochs // 3.0)
        if reducer.n_epochs is not None
        else (100 if len(X) <= 10_000 else 30)
    )
    keep = (vals != 0) & ~(vals < (vals.max() / float(n_epochs)))
    head, tail, weights = rows[keep], cols[keep], vals[keep]
    epochs_per_sample = umap.umap_.make_epochs_per_sample(weights, n_epochs)
    rng_state = np.asarray(_transform_rng_state(reducer.transform_seed), dtype=np.int64)
    rng_state_per_sample = np.full(
        (len(embedding), len(rng_state)), rng_state, dtype=np.int64
    ) + embedding[:, 0].astype(np.float64).view(np.int64).reshape(-1, 1)
    epochs_per_negative_sample = epochs_per_sample / reducer.negative_sample_rate
    _layout_kernel()(
        embedding,
        tail_embedding,
        head,
        tail,
        raw.shape[0],
        epochs_per_sample,
        reducer._a,
        reducer._b,
        rng_state_per_sample,
        reducer.repulsion_strength,
        reducer._initial_alpha / 4.0,
        epochs_per_negative_sample,
        epochs_per_negative_sample.copy(),
        epochs_per_sample.copy(),
        n_epochs,
    )
    return embedding


def _lean(reducer: Any) -> bool:
    return (
        reducer.metric == "cosine"
        and reducer.output_metric == "euclidean"
        and reducer.transform_mode == "embedding"
        and not reducer.densmap
        and not reducer._small_data
        and isinstance(getattr(reducer, "_knn_search_index", None), ExactCosineIndex)
        and reducer.random_state is not None  # else UMAP lays out in parallel (unseeded)
        and not isinstance(reducer.n_epochs, list)
        and reducer._raw_data.shape[0] > 1
    )


def _start(
    indices: NDArray[np.int32], vals: NDArray[np.float32], tail_embedding: NDArray[np.float32]
) -> NDArray[np.float32]:
    """UMAP's ``init_graph_transform``: each new point at the membership-weighted mean of its
    neighbours' embeddings (the neighbour itself if one is identical), summed in column order."""
    vals = np.where(indices >= 0, vals, np.float32(0.0))
    order = np.argsort(
        np.where(indices >= 0, indices, np.iinfo(np.int32).max), axis=1, kind="stable"
    )
    cols = np.take_along_axis(indices, order, axis=1)
    w = np.take_along_axis(vals, order, axis=1)
    row_sum = w.sum(axis=1, dtype=np.float32)
    out = np.zeros((len(w), tail_embedding.shape[1]), dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = w / row_sum[:, None]
    for j in range(w.shape[1]):
        live = w[:, j] != 0
        out[live] += share[live, j, None] * tail_embedding[cols[live, j]]
    identical = w == 1
    for r in np.flatnonzero(identical.any(axis=1)):
        out[r] = tail_embedding[cols[r, np.argmax(identical[r])]]
    out[row_sum == 0] = np.nan
    return out


@functools.cache
def _transform_rng_state(seed: Any) -> tuple[int, int, int]:
    """The three ints UMAP's transform seeds its layout with (the same for every call)."""
    from sklearn.utils import check_random_state

    draw = check_random_state(seed).randint(np.iinfo(np.int32).min, np.iinfo(np.int32).max, 3)
    return tuple(int(v) for v in draw.astype(np.int64))  # type: ignore[return-value]


_single_epoch: Any = None  # UMAP's compiled epoch, bound by _layout_kernel before compiling


def _layout_epochs(  # pragma: no cover - compiled by numba
    head_embedding: Any,
    tail_embedding: Any,
    head: Any,
    tail: Any,
    n_vertices: int,
    epochs_per_sample: Any,
    a: float,
    b: float,
    rng_state_per_sample: Any,
    gamma: float,
    initial_alpha: float,
    epochs_per_negative_sample: Any,
    epoch_of_next_negative_sample: Any,
    epoch_of_next_sample: Any,
    n_epochs: int,
) -> None:
    """UMAP's ``optimize_layout_euclidean`` loop (no densMAP, tail fixed), run inside numba."""
    unused = np.zeros(1, dtype=np.float32)
    dim = head_embedding.shape[1]
    alpha = initial_alpha
    for n in range(n_epochs):
        _single_epoch(
            head_embedding, tail_embedding, head, tail, n_vertices, epochs_per_sample, a, b,
            rng_state_per_sample, gamma, dim, False, alpha, epochs_per_negative_sample,
            epoch_of_next_negative_sample, epoch_of_next_sample, n, False, unused, unused,
            0, 0, 0, 0, unused, unused, 0,
        )  # fmt: skip
        alpha = initial_alpha * (1.0 - (float(n) / float(n_epochs)))


@functools.cache
def _layout_kernel() -> Any:
    """Compile :func:`_layout_epochs` around UMAP's own epoch (numba's disk cache when writable)."""
    import numba

    global _single_epoch
    _single_epoch = load_umap().layouts._nb_optimize_layout_euclidean_single_epoch
    kernel = numba.njit(_layout_epochs, fastmath=True)
    try:
        kernel.enable_caching()
    except RuntimeError as exc:  # no writable cache location: compile as usual
        log.debug("numba cache unavailable for the UMAP layout loop: %s", exc)
    return kernel


def unit_rows(X: NDArray[np.floating]) -> NDArray[np.float32]:
    """Return ``X`` as contiguous float32 rows of unit length, refusing empty or non-finite input."""
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2 or len(X) == 0:
        raise ValueError(f"expected a non-empty (n, d) array of embeddings, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("embeddings contain NaN or infinity")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return np.ascontiguousarray(X / np.maximum(norms, 1e-12), dtype=np.float32)
