"""The start of the clusterer's UMAP layouts: UMAP's spectral initialisation, the same for the same
graph, handed to UMAP as ``init=`` (an array).

ARPACK's ``eigsh`` (UMAP's solver) is not repeatable: on the same matrix it returned each
eigenvector with either sign, and near-equal eigenvalues' vectors mixed differently, from call to
call, so a seeded UMAP of 13 points gave one of two layouts at random (and a group refit, one of
two trees). :func:`spectral_init` computes what UMAP's ``init="spectral"`` computes (the graph
pruned as UMAP prunes it, its spectral layout, connected components laid out apart, the small
noise), with two changes: graphs of at most :data:`DENSE_SPECTRAL_MAX` vertices (every local UMAP
of a build, the refits of small groups) are solved by LAPACK's dense ``eigh`` (the same
eigenvectors of the same normalised Laplacian, a few ms), and every column is flipped so that its
entry of largest magnitude is positive. It draws from the generator UMAP's fit then goes on with,
in UMAP's order, so the fit is the one a patched ``init="spectral"`` gave.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
from numpy.typing import NDArray
from sklearn.metrics import pairwise_distances

__all__ = ["DENSE_SPECTRAL_MAX", "pruned_graph", "spectral_init"]

#: Graphs up to this many vertices get their spectral initialisation from a dense eigensolver.
DENSE_SPECTRAL_MAX = 256


def spectral_init(
    data: NDArray[np.float32],
    graph: scipy.sparse.spmatrix,
    dim: int,
    random_state: np.random.RandomState,
    n_epochs: int | None,
) -> NDArray[np.float32]:
    """Return the (n, dim) start of a UMAP fit on ``data`` whose fuzzy graph is ``graph``.

    ``random_state`` is the generator the fit is then given: this draws from it what UMAP's own
    spectral start draws (the noise; the solver's start vectors where ARPACK runs).
    """
    import umap.distances
    import umap.umap_

    layout = _layout(
        data,
        pruned_graph(graph, n_epochs),
        dim,
        random_state,
        umap.distances.named_distances["cosine"],  # the metric UMAP lays components out with
    )
    coords: NDArray[np.float32] = umap.umap_.noisy_scale_coords(
        layout, random_state, max_coord=10.0, noise=0.0001
    )
    return coords


def pruned_graph(graph: scipy.sparse.spmatrix, n_epochs: int | None) -> scipy.sparse.coo_matrix:
    """The graph UMAP's layout starts from: edges under max / n_epochs dropped (a copy)."""
    graph = scipy.sparse.coo_matrix(graph, copy=True)
    graph.sum_duplicates()
    default = 500 if graph.shape[0] <= 10_000 else 200  # UMAP's default epochs
    epochs = default if n_epochs is None or n_epochs <= 10 else n_epochs
    graph.data[graph.data < (graph.data.max() / float(epochs))] = 0.0
    graph.eliminate_zeros()
    return graph


def _layout(
    data: NDArray[np.float32] | None,
    graph: scipy.sparse.coo_matrix,
    dim: int,
    random_state: np.random.RandomState,
    metric: Any,
) -> NDArray[np.floating]:
    """UMAP's ``spectral_layout`` of ``graph`` (dense when small), columns sign-fixed."""
    from umap.spectral import spectral_layout

    out: NDArray[np.floating] | None = _dense_spectral(graph, dim)
    if out is None:
        parts, labels = scipy.sparse.csgraph.connected_components(graph)
        if parts > 1:
            out = _apart(data, graph, parts, labels, dim, random_state, metric)
        else:
            out = np.asarray(spectral_layout(data, graph, dim, random_state, metric=metric))
    return _fixed_signs(out)


def _fixed_signs(out: NDArray[np.floating]) -> NDArray[np.floating]:
    """Flip every column so that its entry of largest magnitude is positive."""
    if out.ndim != 2 or len(out) == 0:
        return out
    top = out[np.argmax(np.abs(out), axis=0), np.arange(out.shape[1])]
    return out * np.where(top < 0, -1.0, 1.0).astype(out.dtype)


def _dense_spectral(graph: scipy.sparse.spmatrix, dim: int) -> NDArray[np.float64] | None:
    """UMAP's spectral layout (eigenvectors 2..dim+1 of the symmetric normalised Laplacian) by
    a dense solver, for a small graph without isolated vertices; None where UMAP's own must run."""
    n = graph.shape[0]
    if n > DENSE_SPECTRAL_MAX or dim + 1 >= n:
        return None
    G = np.asarray(graph.toarray(), dtype=np.float64)
    degree = G.sum(axis=0)
    if not np.all(degree > 0):
        return None
    scale = 1.0 / np.sqrt(degree)
    laplacian = np.eye(n) - scale[:, None] * G * scale[None, :]
    _, vectors = np.linalg.eigh((laplacian + laplacian.T) / 2)
    return np.ascontiguousarray(vectors[:, 1 : dim + 1])


def _apart(
    data: NDArray[np.float32] | None,
    graph: scipy.sparse.coo_matrix,
    parts: int,
    labels: NDArray[np.int32],
    dim: int,
    random_state: np.random.RandomState,
    metric: Any,
) -> NDArray[np.float32]:
    """UMAP's ``multi_component_layout``: each connected component laid out by :func:`_layout`
    (UMAP's would call ARPACK) in a box around its place in a layout of the components."""
    from umap.spectral import component_layout

    if parts > 2 * dim:
        meta = component_layout(data, parts, labels, dim, random_state, metric=metric)
    else:
        k = int(np.ceil(parts / 2.0))
        base = np.hstack([np.eye(k), np.zeros((k, dim - k))])
        meta = np.vstack([base, -base])[:parts]
    out = np.empty((graph.shape[0], dim), dtype=np.float32)
    csr = graph.tocsr()
    for label in range(parts):
        member = labels == label
        part = csr[member, :].tocsc()[:, member].tocoo()
        distances = pairwise_distances([meta[label]], meta)
        half = distances[distances > 0.0].min() / 2.0
        if part.shape[0] < 2 * dim or part.shape[0] <= dim + 1:
            box = random_state.uniform(low=-half, high=half, size=(part.shape[0], dim))
            out[member] = box + meta[label]
        else:
            layout = _layout(None, part, dim, random_state, metric)
            out[member] = layout * (half / np.max(np.abs(layout))) + meta[label]
    return out
