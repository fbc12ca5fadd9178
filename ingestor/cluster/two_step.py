"""RAPTOR's two-step clustering of one layer's embeddings [R §3, A §3.3].

Global step: UMAP (n_neighbors = √n, 10 dims, cosine) then a GMM whose k minimises BIC; every point
goes to its most probable global cluster (adRAP treats the global clustering as stable and places
new points the same way [A §4.4]). Local step, inside each global cluster: UMAP (n_neighbors = 10)
then a GMM by BIC, with soft assignment: a point joins every local cluster whose posterior exceeds
``threshold`` (and always its most probable one). The final clusters are all local clusters.

Speed (2-core machine; 1,400 MiniLM embeddings cluster in ~2.5 s once numba's cache is warm):

* kNN graphs are exact and computed by one BLAS product (inputs are L2-normalised, so cosine
  distance is ``1 - x·y``) and handed to UMAP as ``precomputed_knn`` with :class:`ExactCosineIndex`
  as its search index. UMAP's own small-data path calls a numba distance once per *pair* from
  Python (2.5-5 s for 1,300 points); the product takes ~40 ms. UMAP's ``transform`` only calls
  ``query`` on the index, so new points are placed exactly as UMAP would place them.
* UMAP's kernels are not declared ``cache=True`` (7-9 s of compiling in every new process):
  :func:`load_umap` turns numba's on-disk cache on for them; only the first process compiles.
* ``n_epochs=200`` (UMAP's 500 for small inputs): half the time, global ARI 0.912 vs 0.911.
* GMMs and the BIC search: see :mod:`ingestor.cluster.gmm`.

Scale: past ``fit_sample`` points, UMAP and the GMM are fitted on a seeded sample, the rest placed
in fixed blocks; each group's local step (a pure function of its rows and seed) and the blocks
run on ``workers`` processes (:mod:`ingestor.cluster.parallel`): the same for any worker count.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, MutableSequence
from dataclasses import dataclass, fields
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray
from sklearn.mixture import GaussianMixture

from ingestor.cluster.fit_steps import FitSteps, LocalFit, fit_group, reduce_group
from ingestor.cluster.global_split import DEFAULT_MAX_GROUP, bound_groups
from ingestor.cluster.gmm import (
    gaussian_parameters,
    most_probable,
    predict_blocks,
    soft_assign,
    to_sklearn,
)
from ingestor.cluster.parallel import WorkerPool, restore_index, worker_pool
from ingestor.cluster.umap_reduce import load_umap, umap_call, unit_rows

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_CLUSTER_SIZE", "LocalModel", "TreeClusterer", "warm_up"]

#: Default bound on the local clusters' mean size (see ``TreeClusterer``'s ``max_cluster_size``).
DEFAULT_MAX_CLUSTER_SIZE = 24


@dataclass
class LocalModel:
    """The local clustering inside one global cluster.

    Attributes:
        members: (m,) sorted row indices (into the fitted X) of the global cluster.
        umap: its fitted local UMAP, or None when the cluster was too small to reduce.
        gmm: its local GaussianMixture, or None in that guarded case.
        embedding: (m, c) float32 reduced local embeddings of ``members``, or None when guarded.
        cluster_ids: final cluster id of each GMM component (-1: a component that received no
            point); the guarded case has one id, the whole global cluster.
    """

    members: NDArray[np.intp]
    umap: Any | None
    gmm: GaussianMixture | None
    embedding: NDArray[np.float32] | None
    cluster_ids: tuple[int, ...]


class TreeClusterer:
    """Two-step UMAP + GMM clustering of one tree layer (scikit-learn conventions).

    Args:
        n_components: UMAP output dimensions (the papers' 10).
        threshold: soft-assignment posterior threshold of the local step (0.1).
        max_clusters: BIC searches k up to max(max_clusters, √n) (see
            ``ingestor.cluster.bic_search.bic_k_max``).
        local_n_neighbors: UMAP n_neighbors of the local step (10).
        metric: only "cosine" (inputs are L2-normalised embeddings).
        random_state: seed of UMAP, the GMMs and the fit sample; None runs UMAP in parallel,
            not reproducibly.
        fit_sample: above this many points, UMAP and GMMs are fitted on a seeded sample and the
            rest is placed with ``transform``.
        max_iter: EM iterations per GMM fit; n_epochs: UMAP layout epochs (200).
        exhaustive_bic: try every k instead of the coarse-to-fine BIC search.
        max_group: a global cluster holding more points is cut in two in the global UMAP space,
            until none does (:mod:`ingestor.cluster.global_split`); None: never.
        max_cluster_size: the local step fits at least ⌈m / max_cluster_size⌉ components to a
            global cluster of m points (None: BIC alone, whose clusters grow with the tree:
            265k leaves, 40 leaves on average, 217 at most, against 6 and 15 at 2.7k; RAPTOR's
            code likewise re-clusters a cluster past 3,500 tokens).
        workers: processes for the local steps and blocked transforms of a fit (1: this one);
            the fit is the same for any number.
    """

    def __init__(
        self,
        n_components: int = 10,
        threshold: float = 0.1,
        max_clusters: int = 50,
        local_n_neighbors: int = 10,
        metric: str = "cosine",
        random_state: int | None = 0,
        fit_sample: int = 5000,
        max_iter: int = 100,
        n_epochs: int = 200,
        exhaustive_bic: bool = False,
        max_group: int | None = DEFAULT_MAX_GROUP,
        max_cluster_size: int | None = DEFAULT_MAX_CLUSTER_SIZE,
        workers: int = 1,
    ) -> None:
        self.n_components = n_components
        self.threshold = threshold
        self.max_clusters = max_clusters
        self.local_n_neighbors = local_n_neighbors
        self.metric = metric
        self.random_state = random_state
        self.fit_sample = fit_sample
        self.max_iter = max_iter
        self.n_epochs = n_epochs
        self.exhaustive_bic = exhaustive_bic
        self.max_group = max_group
        self.max_cluster_size = max_cluster_size
        self.workers = workers

    def fit(
        self, X: NDArray[np.floating], *, local_models: MutableSequence[LocalModel] | None = None
    ) -> Self:
        """Cluster the rows of X.

        Args:
            X: (n, d) embeddings, L2-normalised (rows are renormalised defensively), n ≥ 1.
            local_models: an empty sequence the local models are appended to as they are
                fitted (a first build's writes each to disk); default a new list.

        Returns:
            self, with ``clusters_`` (sorted member tuples of each final cluster), ``n_clusters_``,
            ``global_labels_`` (n,), ``global_umap_``/``global_gmm_`` (None when n ≤
            n_components + 1), ``global_components_`` (GMM component of each global cluster) and
            ``local_models_`` (one :class:`LocalModel` per global cluster).

        Raises:
            ValueError: X is empty, not 2-D or not finite, or a parameter is invalid.
        """
        if self.metric != "cosine":
            raise ValueError(f"metric={self.metric!r} is not supported; use metric='cosine'")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold={self.threshold!r} must be in (0, 1)")
        X = unit_rows(X)
        n = len(X)
        self.n_features_in_ = X.shape[1]
        rng = np.random.default_rng(self.random_state)
        self.clusters_: list[tuple[int, ...]] = []
        self.local_models_ = [] if local_models is None else local_models  # may be a sink
        self.global_umap_: Any | None = None
        self.global_gmm_: GaussianMixture | None = None
        if n <= self.n_components + 1:  # too few points to reduce (RAPTOR's guard): one cluster
            self.global_components_ = np.zeros(1, dtype=np.intp)
            self.global_labels_ = np.zeros(n, dtype=np.intp)
            self.local_models_.append(LocalModel(np.arange(n), None, None, None, (0,)))
            self.clusters_.append(tuple(range(n)))
            self.n_clusters_ = 1
            return self

        with worker_pool(self.workers) as pool:
            self._fit_steps(X, rng, pool)
        self.n_clusters_ = len(self.clusters_)
        n_global = len(self.global_components_)
        log.debug("clustered %d points: %d global, %d final", n, n_global, self.n_clusters_)
        return self

    def fit_local(self, X: NDArray[np.floating]) -> LocalModel:
        """Run only the local step on the rows of X, as if they were one global cluster: a local
        UMAP and a GMM chosen by BIC (at least ``⌈n / max_cluster_size⌉`` components). Sets
        ``clusters_`` (the final clusters, as :meth:`fit` does) and returns the local model, whose
        ``cluster_ids`` index ``clusters_``."""
        X = unit_rows(X)
        self.n_features_in_ = X.shape[1]
        self.clusters_ = []
        return self._place(np.arange(len(X)), self._steps().fit_group(X, self.random_state))

    def reduce_local(self, X: NDArray[np.floating]) -> tuple[Any, NDArray[np.float32]]:
        """Fit only a local UMAP on the rows of X (more than ``n_components + 1``), as the local
        step would, and return it with the (n, c) embedding of every row: the space a group's
        clusters are re-described in when its stored model cannot be read."""
        X = unit_rows(X)
        self.n_features_in_ = X.shape[1]
        with worker_pool(self.workers) as pool:
            umap, Y, _ = self._steps().reduce_local(X, self.random_state, pool)
        return umap, Y

    def reduce_locals(
        self, Xs: Iterable[NDArray[np.floating]], *, count: int, rows: int
    ) -> Iterator[tuple[Any, NDArray[np.float32]]]:
        """:meth:`reduce_local` of each of ``count`` groups' rows ``Xs`` (``rows`` in all), on
        this clusterer's workers, yielded in order: each fit is a pure function of its rows and
        the seed, so the same for any number of workers. ``Xs`` is read as the workers take
        them (a few groups ahead), not all at once."""
        steps = self._steps()
        tasks = ((steps, unit_rows(X), self.random_state) for X in Xs)
        with worker_pool(self.workers) as pool:
            results = pool.map(
                reduce_group,
                tasks,
                count=count,
                rows=rows,
                what=lambda i: f"local UMAP {i + 1} of {count} (a refit)",
            )
            for reducer, Y in results:
                yield restore_index(reducer), Y

    def fit_groups(self, X: NDArray[np.floating], labels: NDArray[np.intp], n_groups: int) -> Self:
        """Fit the global step around given global clusters: a global UMAP on X and one global
        component per group, the M-step of ``labels`` in that space (a group without points gets
        a component no point prefers), so :meth:`predict_global` routes new rows to the groups a
        layer already has. For a layer whose stored global model cannot be read.

        Args:
            X: (n, d) the layer's node embeddings.
            labels: (n,) each row's group, in ``range(n_groups)``.
            n_groups: the layer's number of global clusters.

        Returns:
            self, with the global attributes of :meth:`fit`; ``local_models_`` and ``clusters_``
            empty (the caller keeps the layer's).
        """
        X = unit_rows(X)
        n = len(X)
        self.n_features_in_ = X.shape[1]
        self.clusters_ = []
        self.local_models_ = []
        self.n_clusters_ = 0
        self.global_labels_ = np.asarray(labels, dtype=np.intp)
        self.global_umap_ = None
        self.global_gmm_ = None
        if n_groups <= 1 or n <= self.n_components + 1:  # as fit: too few to reduce, group 0
            self.global_components_ = np.zeros(1, dtype=np.intp)
            return self
        steps = self._steps()
        fit_idx = steps.sample(n, np.random.default_rng(self.random_state))
        with worker_pool(self.workers) as pool:
            self.global_umap_, Y = steps.reduce(
                X, fit_idx, math.isqrt(len(fit_idx)), "global", pool
            )
        resp = np.zeros((n, n_groups))
        resp[np.arange(n), self.global_labels_] = 1.0
        self.global_gmm_ = to_sklearn(
            gaussian_parameters(np.asarray(Y, dtype=np.float64), resp),
            random_state=self.random_state,
            max_iter=self.max_iter,
        )
        self.global_components_ = np.arange(n_groups, dtype=np.intp)
        return self

    def build_group_size(self) -> float | None:
        """The mean number of points per global cluster the fit made (None: not recorded)."""
        labels = getattr(self, "global_labels_", None)
        if labels is None or len(labels) == 0:
            return None
        return len(labels) / (int(np.max(labels)) + 1)

    def predict(self, X: NDArray[np.floating]) -> list[frozenset[int]]:
        """Place new points into the fitted clusters without refitting.

        Global UMAP ``transform`` → most probable global cluster → its local UMAP ``transform``
        → local GMM posterior → every final cluster with posterior > ``threshold`` (at least the
        most probable one).

        Args:
            X: (n, d) embeddings.

        Returns:
            For each row, the ids (indices into ``clusters_``) of the clusters it belongs to.
        """
        X = self._check_new(X)
        if self.global_umap_ is None:
            return [frozenset(self.local_models_[0].cluster_ids)] * len(X)
        out: list[frozenset[int]] = [frozenset()] * len(X)
        labels = self.predict_global(X)
        for g in np.unique(labels):
            rows = np.flatnonzero(labels == g)
            local = self.local_models_[g]
            if local.gmm is None:
                for r in rows:
                    out[r] = frozenset(local.cluster_ids)
                continue
            ids = np.asarray(local.cluster_ids)
            posterior = local.gmm.predict_proba(self.transform_local(int(g), X[rows]))
            for r, assigned in zip(
                rows, soft_assign(posterior, self.threshold, ids >= 0), strict=True
            ):
                out[r] = frozenset(ids[assigned].tolist())
        return out

    def predict_global(self, X: NDArray[np.floating]) -> NDArray[np.intp]:
        """Return the (n,) index of the most probable global cluster of each row of X."""
        if self.global_gmm_ is None:
            return np.zeros(len(X), dtype=np.intp)
        return most_probable(self.global_gmm_, self.transform_global(X), self.global_components_)

    def transform_global(self, X: NDArray[np.floating]) -> NDArray[np.float32]:
        """Return the (n, c) global UMAP embedding of X (ValueError in the one-cluster case)."""
        if self.global_umap_ is None:
            raise ValueError("fitted on too few points for a global UMAP: everything is cluster 0")
        with umap_call("global UMAP transform", serial=self._serial()):
            Y = self.global_umap_.transform(self._check_new(X))
        return np.asarray(Y, dtype=np.float32)

    def transform_local(self, g: int, X: NDArray[np.floating]) -> NDArray[np.float32]:
        """Return the (n, c) embedding of X by global cluster g's UMAP (ValueError: none)."""
        local = self.local_models_[g]
        if local.umap is None:
            raise ValueError(f"global cluster {g} has {len(local.members)} members: no local UMAP")
        with umap_call(f"local UMAP {g} transform", serial=self._serial()):
            Y = local.umap.transform(self._check_new(X))
        return np.asarray(Y, dtype=np.float32)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Pickled before global clusters were bounded: the default bound.
        state.setdefault("max_group", DEFAULT_MAX_GROUP)
        state.setdefault("max_cluster_size", DEFAULT_MAX_CLUSTER_SIZE)  # its refits are bounded
        state.setdefault("workers", 1)
        self.__dict__.update(state)
        reducers = [self.__dict__.get("global_umap_")]
        # local_models_ is None while the state database stores them one row each.
        reducers += [local.umap for local in self.__dict__.get("local_models_") or ()]
        for reducer in reducers:
            restore_index(reducer)

    # -- internals -------------------------------------------------------------------------

    def _fit_steps(
        self, X: NDArray[np.float32], rng: np.random.Generator, pool: WorkerPool
    ) -> None:
        steps = self._steps()
        fit_idx = steps.sample(len(X), rng)
        self.global_umap_, Y = steps.reduce(X, fit_idx, math.isqrt(len(fit_idx)), "global", pool)
        self.global_gmm_ = steps.select_gmm(Y[fit_idx], pool=pool)  # its fits on the workers
        component = predict_blocks(self.global_gmm_, Y)  # not (n, k) log-probabilities at once
        if self.max_group is not None:
            self.global_gmm_, component = bound_groups(
                self.global_gmm_, Y, component, self.max_group, random_state=self.random_state
            )
        self.global_components_ = np.unique(component)  # components that received a point
        self.global_labels_ = np.searchsorted(self.global_components_, component)
        groups = [
            np.flatnonzero(self.global_labels_ == g) for g in range(len(self.global_components_))
        ]
        # One seed per group, drawn up front in group order: a group's fit depends on its rows
        # and its seed only, not on which worker runs it or when.
        seeds = rng.integers(2**63, size=len(groups)).tolist()
        # Bounded groups in group order, each placed (into a sink that may write it out) as it
        # comes; unbounded, the largest first (no worker left with a large one at the end).
        order = list(range(len(groups)))
        if self.max_group is None:
            order.sort(key=lambda g: (-len(groups[g]), g))
        done = pool.stream(
            fit_group,
            ((steps, X[groups[g]], seeds[g]) for g in order),
            count=len(groups),
            rows=len(X),
            what=lambda i: (
                f"local step of global cluster {order[i]} ({len(groups[order[i]])} points)"
            ),
        )
        held: dict[int, LocalFit | None] = {}
        for g, fit in zip(order, done, strict=True):
            held[g] = fit
            while (nxt := len(self.local_models_)) in held:  # cluster ids in group order
                self.local_models_.append(self._place(groups[nxt], held.pop(nxt)))

    def _place(self, members: NDArray[np.intp], fit: LocalFit | None) -> LocalModel:
        """Number a local fit's clusters after those made so far; return its LocalModel."""
        if fit is None:
            self.clusters_.append(tuple(members.tolist()))
            return LocalModel(members, None, None, None, (len(self.clusters_) - 1,))
        ids = []
        for j in range(fit.assigned.shape[1]):
            if not fit.assigned[:, j].any():  # a component no point prefers: no cluster
                ids.append(-1)
                continue
            ids.append(len(self.clusters_))
            self.clusters_.append(tuple(members[fit.assigned[:, j]].tolist()))
        return LocalModel(members, restore_index(fit.umap), fit.gmm, fit.embedding, tuple(ids))

    def _steps(self) -> FitSteps:
        return FitSteps(**{f.name: getattr(self, f.name) for f in fields(FitSteps)})

    def _serial(self) -> bool:
        load_umap()  # a clusterer loaded from disk has not enabled numba's cache for UMAP yet
        return self.random_state is not None  # seeded UMAP is serial (and reproducible)

    def _check_new(self, X: NDArray[np.floating]) -> NDArray[np.float32]:
        X = unit_rows(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features; the clusterer was fitted on {self.n_features_in_}"
            )
        return X


def warm_up(random_state: int = 0) -> None:
    """Compile (or load from numba's disk cache) UMAP's kernels by clustering a tiny random set.

    The first UMAP fit and transform of a process cost ~7 s of numba compilation when the disk
    cache is cold; a daemon can call this in a background thread while it embeds.
    """
    rng = np.random.default_rng(random_state)
    X = rng.standard_normal((40, 16)).astype(np.float32)
    clusterer = TreeClusterer(n_components=2, random_state=random_state, n_epochs=10).fit(X)
    clusterer.predict(X[:2] + 0.01)
