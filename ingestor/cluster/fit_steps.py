"""The steps a two-step fit is made of (:mod:`ingestor.cluster.two_step`), as pure functions of
their parameters and rows: a seeded sample, a UMAP fitted on it that places the other rows, a GMM
chosen by BIC, and the local step of one global cluster.

The local step of each global cluster runs in a worker process (:mod:`ingestor.cluster.parallel`),
so :class:`FitSteps` is a small picklable value, and :func:`fit_group` returns what the parent
numbers (cluster ids follow the order of the global clusters, not the order fits finish in).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray
from sklearn.mixture import GaussianMixture

from ingestor.cluster.bic_search import bic_k_max, select_gmm_by_bic
from ingestor.cluster.gmm import soft_assign
from ingestor.cluster.parallel import WorkerPool, transform_in_blocks
from ingestor.cluster.umap_reduce import fit_umap

__all__ = ["FitSteps", "LocalFit", "fit_group"]


class LocalFit(NamedTuple):
    """The local step's result for one global cluster of m points (see ``LocalModel``).

    Attributes:
        umap: its fitted local UMAP.
        gmm: its local GaussianMixture of k components.
        embedding: (m, c) float32 reduced local embeddings of its points.
        assigned: (m, k) soft assignment: point i joins the cluster of component j.
    """

    umap: Any
    gmm: GaussianMixture
    embedding: NDArray[np.float32]
    assigned: NDArray[np.bool_]


@dataclass(frozen=True)
class FitSteps:
    """The parameters of the steps (``TreeClusterer``'s, of the same names) and the steps."""

    n_components: int
    threshold: float
    max_clusters: int
    local_n_neighbors: int
    random_state: int | None
    fit_sample: int
    max_iter: int
    n_epochs: int
    exhaustive_bic: bool
    max_cluster_size: int | None

    def sample(self, n: int, rng: np.random.Generator) -> NDArray[np.intp]:
        """Return the sorted rows (of n) to fit on: all of them, or ``fit_sample`` drawn by rng."""
        if n <= self.fit_sample:
            return np.arange(n)
        return np.sort(rng.choice(n, size=self.fit_sample, replace=False))

    def reduce(
        self,
        X: NDArray[np.float32],
        fit_idx: NDArray[np.intp],
        n_neighbors: int,
        what: str,
        pool: WorkerPool,
    ) -> tuple[Any, NDArray[np.float32]]:
        """Fit UMAP on X[fit_idx]; return it and the (len(X), c) embedding of every row, the
        others placed by its transform in blocks (on ``pool``)."""
        n_fit = len(fit_idx)
        n_neighbors = max(2, min(n_neighbors, n_fit - 1))
        reducer = fit_umap(
            X[fit_idx],
            n_neighbors=n_neighbors,
            n_components=min(self.n_components, n_fit - 2),  # spectral init needs c + 1 < n
            n_epochs=self.n_epochs,
            random_state=self.random_state,
            what=f"{what} UMAP on {n_fit} points",
        )
        Y = np.empty((len(X), reducer.embedding_.shape[1]), dtype=np.float32)
        Y[fit_idx] = reducer.embedding_
        if n_fit < len(X):
            rest = np.setdiff1d(np.arange(len(X)), fit_idx)
            Y[rest] = transform_in_blocks(
                pool,
                reducer,
                X,
                rest,
                what=f"{what} UMAP transform",
                serial=self.random_state is not None,  # seeded UMAP is serial (and reproducible)
            )
        return reducer, Y

    def reduce_local(
        self, X: NDArray[np.float32], seed: int | None, pool: WorkerPool | None = None
    ) -> tuple[Any, NDArray[np.float32], NDArray[np.intp]]:
        """The local step's UMAP on the rows X of one group, fitted on the sample ``seed`` draws
        (:meth:`sample`): the UMAP, the embedding of every row (:meth:`reduce`; ``pool``: its
        transform's workers, none by default) and the rows it was fitted on. One code path for
        the local step, a group's refit and a refit's workers."""
        fit_idx = self.sample(len(X), np.random.default_rng(seed))
        umap, Y = self.reduce(X, fit_idx, self.local_n_neighbors, "local", pool or WorkerPool(1))
        return umap, Y, fit_idx

    def select_gmm(
        self, Y: NDArray[np.float32], k_min: int = 1, pool: WorkerPool | None = None
    ) -> GaussianMixture:
        """Return the GMM of at least ``k_min`` components that BIC prefers on the rows of Y;
        with ``pool`` (the global step), the search's fits are made on its workers."""
        mapper = None
        if pool is not None:
            p = pool

            def mapper(fn: Callable[[Any], Any], tasks: list[Any]) -> list[Any]:
                return p.map(
                    fn,
                    tasks,
                    count=len(tasks),
                    rows=len(Y),  # a sample: processes only if started already
                    what=lambda i: f"BIC fit {i + 1} of {len(tasks)} on {len(Y)} points",
                )

        return select_gmm_by_bic(
            Y,
            bic_k_max(len(Y), self.max_clusters),
            random_state=self.random_state,
            max_iter=self.max_iter,
            exhaustive=self.exhaustive_bic,
            k_min=k_min,
            mapper=mapper,
        )

    def fit_group(self, X: NDArray[np.float32], seed: int | None) -> LocalFit | None:
        """The local step on the rows X of one global cluster: a local UMAP and a GMM by BIC of at
        least ⌈m / max_cluster_size⌉ components, soft-assigned at ``threshold``; None when the
        cluster is too small to reduce (RAPTOR's guard: it is one cluster). A pure function of X
        and seed (which draws the fit sample)."""
        m = len(X)
        if m <= self.n_components + 1:
            return None
        umap, Y, fit_idx = self.reduce_local(X, seed)
        size = self.max_cluster_size
        gmm = self.select_gmm(Y[fit_idx], k_min=1 if size is None else math.ceil(m / size))
        return LocalFit(umap, gmm, Y, soft_assign(gmm.predict_proba(Y), self.threshold, None))


def fit_group(task: tuple[FitSteps, NDArray[np.float32], int]) -> LocalFit | None:
    """``steps.fit_group(X, seed)`` for ``task = (steps, X, seed)``: a worker's task."""
    steps, X, seed = task
    return steps.fit_group(X, seed)


def reduce_group(
    task: tuple[FitSteps, NDArray[np.float32], int | None],
) -> tuple[Any, NDArray[np.float32]]:
    """A group's local UMAP alone, fitted as the local step fits it (the same sample of the
    rows, drawn from ``seed``), and the embedding of every row: for ``task = (steps, X, seed)``,
    a worker's task (:meth:`~ingestor.cluster.two_step.TreeClusterer.reduce_locals`)."""
    steps, X, seed = task
    umap, Y, _ = steps.reduce_local(X, seed)
    return umap, Y
