"""adRAP's online Gaussian mixture (Algorithm 2 of [A §4.3]): its parameters, points and clusters.

One :class:`OnlineGMM` holds the local clustering of one global cluster: the mixture, the points
(reduced local embeddings) and each point's clusters (soft: posterior > ``threshold``, at least
the most probable one). Clusters have stable integer ids (a summary node is keyed by one); every
update reports which ids changed, were created, split or removed: adRAP regenerates only those.

``add(x)`` follows Algorithm 2. n ≤ τ_n: EM to convergence from the current parameters on all
points, then fresh fits with K + 1 .. K + c components (c: clusters past τ_c) compete by BIC; new
clusters inherit the id of the old cluster they overlap most (:mod:`.update`). n > τ_n: one
incremental M-step (Equation 3 in its exact form: :func:`.update.incremental_m_step`); the point
joins its clusters and a cluster past τ_c is offered a split into k' = 1, 2, 3 by BIC
(:mod:`.split`). ``remove(point)`` drops a point and the clusters left empty, parameters
otherwise unchanged.

Deviation: :attr:`OnlineGMM.offered` records each cluster's size at its last split offer; a
cluster is offered again after each quarter of growth (:func:`.split.offer_due`), not on every
insert (an offer costs O(cluster); see docs/architecture.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.gmm import (
    REG_COVAR,
    GaussianParams,
    params_of,
    responsibilities,
    soft_assign,
    to_sklearn,
)
from ingestor.cluster.online_gmm.points import IdCounter, PointBuffer
from ingestor.cluster.online_gmm.split import offer_due, replace_component, split_offer
from ingestor.cluster.online_gmm.update import (
    UpdateResult,
    incremental_m_step,
    inherited_ids,
    refit_by_bic,
)

if TYPE_CHECKING:
    from sklearn.mixture import GaussianMixture

log = logging.getLogger(__name__)

__all__ = ["OnlineGMM"]


class OnlineGMM:
    """An incrementally updated local clustering (adRAP Algorithm 2). Components without members
    are dropped at construction: every cluster has a member.

    Args:
        params: fitted mixture parameters (k components in d dims).
        points: (n, d) points the mixture was fitted on (reduced local embeddings).
        cluster_ids: id of each component's cluster (default: fresh ids from ``ids``); -1 means
            "no id yet" (a fresh id is taken if the component has members).
        point_ids: id of each point (default 0..n-1); ``add`` continues after the largest.
        memberships: components each point belongs to (default: posterior > threshold, at least
            the most probable component, as the tree build assigns them).
        threshold: soft-assignment posterior threshold (0.1).
        tau_n: at most this many points, ``add`` runs full EM (the paper: max(100, √|D0|)).
        tau_c: a cluster with more members than this is offered a split (11).
        ids: the id counter, shared by the OnlineGMMs of one layer.
        random_state: seed of the fresh GMM fits.
        reg_covar: covariance regularisation (scikit-learn's default, as in the tree build).
        max_iter: EM iterations.
        min_split_size: a split is only taken if every part gets at least this many members
            (our addition to the paper; see ``_try_split``).
    """

    def __init__(
        self,
        params: GaussianParams,
        points: NDArray[np.floating],
        *,
        cluster_ids: Sequence[int] | None = None,
        point_ids: Sequence[int] | None = None,
        memberships: Sequence[Iterable[int]] | None = None,
        threshold: float = 0.1,
        tau_n: int = 100,
        tau_c: int = 11,
        ids: IdCounter | None = None,
        random_state: int | None = 0,
        reg_covar: float = REG_COVAR,
        max_iter: int = 100,
        min_split_size: int = 2,
    ) -> None:
        X = np.array(points, dtype=np.float64, ndmin=2)
        if X.shape[1] != params.means.shape[1]:
            raise ValueError(f"points have {X.shape[1]} dims, the mixture {params.means.shape[1]}")
        self.threshold = threshold
        self.tau_n = tau_n
        self.tau_c = tau_c
        self.random_state = random_state
        self.reg_covar = reg_covar
        self.max_iter = max_iter
        self.min_split_size = min_split_size
        pids = list(point_ids) if point_ids is not None else list(range(len(X)))
        self._points = PointBuffer(X.copy(), pids)
        self._next_point = max(pids, default=-1) + 1
        given = list(cluster_ids) if cluster_ids is not None else [-1] * params.k
        if len(given) != params.k:
            raise ValueError(f"{len(given)} cluster ids for {params.k} components")
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold={threshold!r} must be in (0, 1)")
        self.ids = ids if ids is not None else IdCounter()
        self.ids.next_id = max(self.ids.next_id, max(given, default=-1) + 1)
        if memberships is None:
            comps = self._assign(responsibilities(X, params)[1]) if len(X) else []
        else:
            comps = [frozenset(m) for m in memberships]
        self.params = params
        self.cluster_ids = given
        self.members: dict[int, set[int]] = {}
        self.offered: dict[int, int] = {}
        self._install(params, comps, given)
        self.fitted = self.n  # points the model (and the local UMAP placing them) was fitted on
        self.fitted_largest = max(map(len, self.members.values()), default=0)  # its largest cluster
        self.churn = 0  # points added or removed since then (see AdaptiveLayer's local refit)

    @classmethod
    def from_gmm(cls, gmm: GaussianMixture, points: NDArray[np.floating], **kwargs: Any) -> Self:
        """Build from a fitted full-covariance ``GaussianMixture`` (other args as ``__init__``)."""
        return cls(params_of(gmm), points, **kwargs)

    # -- read access -------------------------------------------------------------------------

    @property
    def n(self) -> int:
        """Number of points."""
        return self._points.n

    @property
    def point_ids(self) -> list[int]:
        """Ids of the points, in the row order of :attr:`points`."""
        return list(self._points.ids)

    @property
    def points(self) -> NDArray[np.float64]:
        """(n, d) the points, rows in :attr:`point_ids` order."""
        return self._points.view().copy()

    def clusters(self) -> dict[int, frozenset[int]]:
        """Return each cluster id's member point ids."""
        return {cid: frozenset(m) for cid, m in self.members.items()}

    def memberships(self, point: int) -> frozenset[int]:
        """Return the cluster ids a point belongs to."""
        return frozenset(cid for cid, m in self.members.items() if point in m)

    def offer_due(self, cid: int) -> bool:
        """Whether cluster ``cid`` is due its split offer
        (:func:`~ingestor.cluster.online_gmm.split.offer_due` of its size and :attr:`offered`)."""
        return offer_due(len(self.members[cid]), self.tau_c, self.offered.get(cid, 0))

    def to_sklearn(self) -> GaussianMixture:
        """Return the current mixture as a fitted ``GaussianMixture`` (components in id order)."""
        return to_sklearn(self.params, reg_covar=self.reg_covar, random_state=self.random_state)

    # -- updates -----------------------------------------------------------------------------

    def add(self, x: NDArray[np.floating]) -> UpdateResult:
        """Insert one point (adRAP Algorithm 2).

        Args:
            x: (d,) the new point's reduced local embedding.

        Returns:
            The new point's id and clusters, and every cluster id changed, created, split, removed.
        """
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        pid = self._next_point
        self._next_point += 1
        self.churn += 1
        old_ids = frozenset(self.members)
        if self.params.k == 0:  # everything was removed: the point starts a cluster of its own
            self._points.append(pid, x)
            params = GaussianParams(np.ones(1), x[None, :], (self.reg_covar * np.eye(len(x)))[None])
            self._install(params, [frozenset({0})], [-1])
            return UpdateResult.diff(self.members, pid, old_ids, {}, refit=True)
        if self.n <= self.tau_n:
            before = self.clusters()  # a refit may move any point: compare every cluster
            self._points.append(pid, x)
            self._refit()
            return UpdateResult.diff(self.members, pid, old_ids, before, refit=True)

        _, gamma = responsibilities(x[None, :], self.params)
        self.params = incremental_m_step(self.params, self.n, x, gamma[0], self.reg_covar)
        self._points.append(pid, x)
        _, post = responsibilities(x[None, :], self.params)
        joined = [self.cluster_ids[comp] for comp in sorted(self._assign(post)[0])]
        # Only the clusters the point joins can change (and the parts of a split): the cost of
        # this branch does not grow with n, apart from the split fits on one cluster's members.
        before = {cid: frozenset(self.members[cid]) for cid in joined}
        for cid in joined:
            self.members[cid].add(pid)
        offer = [cid for cid in joined if self.offer_due(cid)]
        split = {cid for cid in offer if self._try_split(cid)}
        made = self.members.keys() - old_ids  # the parts of its splits
        near = [*joined, *made]  # the only clusters it can be in
        for cid in [*offer, *made]:  # offered now, or made by a split (BIC's choice)
            self.offered[cid] = len(self.members[cid])
        return UpdateResult.diff(self.members, pid, old_ids, before, split=split, near=near)

    def add_many(self, X: NDArray[np.floating]) -> tuple[list[int], list[UpdateResult]]:
        """Insert points in order, as :meth:`add` each, with one full-EM refit per run of points
        that arrive while n ≤ τ_n instead of one per point.

        That refit (EM to convergence from the current parameters, and the fresh fits by BIC) run
        once after the run's last point lands where the last per-point refit would have started
        from, without the intermediate fits, each of which could move boundary points and so
        regenerate summaries although only the batch's final memberships matter.

        Returns:
            The new points' ids (in the order of ``X``) and the results in operation order
            (a run's refit is one result, its ``point`` -1).
        """
        pids: list[int] = []
        results: list[UpdateResult] = []
        run: tuple[frozenset[int], dict[int, frozenset[int]]] | None = None
        for x in np.asarray(X, dtype=np.float64).reshape(len(X), -1):
            if self.params.k > 0 and self.n <= self.tau_n:
                if run is None:
                    run = (frozenset(self.members), self.clusters())
                pid = self._next_point
                self._next_point += 1
                self.churn += 1
                self._points.append(pid, x)  # members are recomputed by the run's refit
                pids.append(pid)
                continue
            if run is not None:
                results.append(self._refit_run(*run))
                run = None
            result = self.add(x)
            pids.append(result.point)
            results.append(result)
        if run is not None:
            results.append(self._refit_run(*run))
        return pids, results

    def _refit_run(
        self, old_ids: frozenset[int], before: dict[int, frozenset[int]]
    ) -> UpdateResult:
        self._refit()
        return UpdateResult.diff(self.members, -1, old_ids, before, refit=True, assigned=False)

    def add_greedy(self, x: NDArray[np.floating]) -> UpdateResult:
        """Insert one point the way the paper's greedy baseline does [A §6.4].

        The point joins its most probable cluster; the mixture parameters are not updated and no
        cluster is split or created.
        """
        if self.params.k == 0:
            return self.add(x)
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        pid = self._next_point
        self._next_point += 1
        self.churn += 1
        old_ids = frozenset(self.members)
        _, post = responsibilities(x[None, :], self.params)
        cid = self.cluster_ids[int(np.argmax(post[0]))]
        before = {cid: frozenset(self.members[cid])}
        self._points.append(pid, x)
        self.members[cid].add(pid)
        return UpdateResult.diff(self.members, pid, old_ids, before, near=[cid])

    def remove(self, point: int) -> UpdateResult:
        """Delete a point: drop it from its clusters and remove the clusters left empty.

        Raises:
            KeyError: no point has this id.
        """
        if point not in self._points.row:
            raise KeyError(f"no point with id {point}")
        old_ids = frozenset(self.members)
        before = {cid: frozenset(m) for cid, m in self.members.items() if point in m}
        self._points.pop(point)
        self.churn += 1
        for m in self.members.values():
            m.discard(point)
        for cid in before:  # a cluster that shrank grows a quarter from there before its offer
            self.offered[cid] = min(self.offered.get(cid, 0), len(self.members[cid]))
        keep = [j for j, cid in enumerate(self.cluster_ids) if self.members[cid]]
        if len(keep) < self.params.k:
            self.params = self.params.subset(keep)
            for j, cid in enumerate(self.cluster_ids):
                if j not in keep:
                    del self.members[cid]
                    self.offered.pop(cid, None)
            self.cluster_ids = [self.cluster_ids[j] for j in keep]
        return UpdateResult.diff(self.members, point, old_ids, before, assigned=False)

    # -- internals ---------------------------------------------------------------------------

    def _assign(self, posterior: NDArray[np.float64]) -> list[frozenset[int]]:
        """Components of each row: posterior > threshold, and always the most probable one."""
        chosen = soft_assign(posterior, self.threshold)
        return [frozenset(np.flatnonzero(row).tolist()) for row in chosen]

    def _install(
        self, params: GaussianParams, comps: Sequence[frozenset[int]], ids: Sequence[int]
    ) -> None:
        """Set parameters and memberships; drop empty components; give ids to unnamed ones."""
        pids = self._points.ids
        members: list[set[int]] = [set() for _ in range(params.k)]
        for pid, cs in zip(pids, comps, strict=True):
            for c in cs:
                members[c].add(pid)
        keep = [j for j in range(params.k) if members[j]]
        self.params = params.subset(keep)
        self.cluster_ids = [ids[j] if ids[j] >= 0 else self.ids.take() for j in keep]
        self.members = {cid: members[j] for cid, j in zip(self.cluster_ids, keep, strict=True)}
        # Installed parameters come from a fit that chose K by BIC: every cluster was offered.
        self.offered = {cid: len(m) for cid, m in self.members.items()}

    @property
    def buffer(self) -> PointBuffer:
        """The points, with their ids (read only: the tree's store writes them by parts)."""
        return self._points

    def stored_fields(self) -> dict[str, Any]:
        """Everything but the points and the parameters (which the tree's store writes by parts)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_points", "params")}

    @classmethod
    def restore(
        cls, fields: dict[str, Any], points: PointBuffer, params: GaussianParams
    ) -> OnlineGMM:
        """The model :meth:`stored_fields`, its points and parameters describe (the defaults of
        fields added since they were written filled in)."""
        gmm = cls.__new__(cls)
        gmm.__setstate__(fields | {"_points": points, "params": params})
        return gmm

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("offered", {})  # saved before offers were recorded: none is known
        state.setdefault("churn", 0)  # saved before churn was counted: count from now
        state.setdefault("fitted", state["_points"].n)
        # Saved before it was recorded: its clusters as they are now (no refit on load).
        state.setdefault("fitted_largest", max(map(len, state["members"].values()), default=0))
        self.__dict__.update(state)

    def _refit(self) -> None:
        """Algorithm 2, n ≤ τ_n: warm EM, then fresh fits with K+1..K+c components, by BIC."""
        X = self._points.view()
        best = refit_by_bic(
            X,
            self.params,
            self._assign,
            tau_c=self.tau_c,
            reg_covar=self.reg_covar,
            random_state=self.random_state,
            max_iter=self.max_iter,
        )
        log.debug("online GMM refit on %d points: K %d -> %d", len(X), self.params.k, best.k)
        comps = self._assign(responsibilities(X, best)[1])
        self._install(best, comps, inherited_ids(best.k, self._points.ids, comps, self.members))

    def _try_split(self, cid: int, *, cut: bool = False) -> bool:
        """Offer cluster ``cid`` a split into k' ∈ {1, 2, 3} by BIC, or with ``cut`` cut it in
        two (:func:`~ingestor.cluster.online_gmm.split.halve`); return True if it split.

        A candidate with a part of fewer than ``min_split_size`` members is passed over (see
        :func:`~ingestor.cluster.online_gmm.split.best_split`).
        """
        comp = self.cluster_ids.index(cid)
        pids = sorted(self.members[cid])
        Xc = self._points.view()[[self._points.row[p] for p in pids]]
        choice = split_offer(
            Xc,
            pids,
            self._assign,
            cut=cut,
            min_size=self.min_split_size,
            reg_covar=self.reg_covar,
            random_state=self.random_state,
            max_iter=self.max_iter,
        )
        if choice is None:
            return False
        sub, parts = choice
        order = sorted(range(sub.k), key=lambda j: -len(parts[j]))  # the largest keeps the id
        self.params = replace_component(self.params, comp, sub, order)
        new_ids = [cid] + [self.ids.take() for _ in order[1:]]
        self.cluster_ids = [c for c in self.cluster_ids if c != cid] + new_ids
        for new_id, j in zip(new_ids, order, strict=True):
            self.members[new_id] = parts[j]
        log.debug("online GMM: cluster %d (%d points) split in %d", cid, len(pids), sub.k)
        return True

    def cut(self, cid: int) -> bool:
        """Cut cluster ``cid`` in two on its own members, no BIC (one that outgrew its group's
        fit, :meth:`~ingestor.cluster.group_upkeep.GroupUpkeep.cut`); return True if it was cut."""
        return self._try_split(cid, cut=True)
