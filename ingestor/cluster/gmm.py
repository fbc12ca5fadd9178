"""Full-covariance Gaussian mixtures: a vectorised EM and a cheap BIC search over k.

RAPTOR [R §3] and adRAP [A §3.3] pick the number of clusters k of each GMM by minimising the
Bayesian Information Criterion over k = 1..max(50, √n). Those fits dominated the cost of
clustering a tree layer (scikit-learn, exhaustive: ~60 s for 1,400 leaves on 2 cores), and four
things make them cheap here (~0.8 s):

* :func:`~ingestor.cluster.em.run_em` is scikit-learn's EM for ``covariance_type="full"`` (same updates, same
  ``reg_covar``, same stopping rule; equal to 1e-8 from the same start), with every quadratic
  form of an iteration in one matrix product instead of a Python loop over components: 3.4-4x
  faster per iteration. It returns a real ``sklearn.mixture.GaussianMixture``
  (``predict_proba``, ``bic`` and pickling work).
* :func:`~ingestor.cluster.kmeans.kmeans_labels` initialises it like scikit-learn (greedy
  k-means++, then Lloyd) without ``KMeans``' per-call overhead.
* :func:`~ingestor.cluster.bic_search.select_gmm_by_bic` searches k on a coarse-to-fine grid with
  BLAS limited to one thread.

Computation is in float64 whatever the input dtype, so that the incremental updates of
:mod:`ingestor.cluster.online_gmm` and a refit from scratch agree.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from sklearn.mixture import GaussianMixture

log = logging.getLogger(__name__)

__all__ = [
    "EM",
    "REG_COVAR",
    "TOL",
    "EMFit",
    "GaussianParams",
    "gaussian_parameters",
    "most_probable",
    "params_of",
    "precision_cholesky",
    "predict_blocks",
    "responsibilities",
    "soft_assign",
    "to_sklearn",
]

#: Added to covariance diagonals (scikit-learn's default); keeps every covariance invertible.
REG_COVAR = 1e-6
#: EM stops when the mean log-likelihood changes by less than this (scikit-learn's default).
TOL = 1e-3
#: Rows per block of :func:`predict_blocks`.
PREDICT_BLOCK = 16_384

Array = NDArray[np.float64]


@dataclass(frozen=True)
class GaussianParams:
    """Parameters of a full-covariance mixture of k components in d dimensions.

    Attributes:
        weights: (k,) mixing proportions π, summing to 1.
        means: (k, d) μ.
        covariances: (k, d, d) Σ, each including ``reg_covar`` on its diagonal.
    """

    weights: Array
    means: Array
    covariances: Array

    @property
    def k(self) -> int:
        return len(self.weights)

    def precision_cholesky(self) -> Array:
        """:func:`precision_cholesky` of the covariances, computed once (parameters are never
        changed in place; the online GMM evaluates one point at a time against ~150 of them)."""
        cached = self.known_precisions
        if cached is None:
            cached = precision_cholesky(self.covariances)
            object.__setattr__(self, "_prec_chol", cached)
        return cached

    @property
    def known_precisions(self) -> Array | None:
        """:meth:`precision_cholesky` if it was computed or given, else None."""
        cached: Array | None = self.__dict__.get("_prec_chol")
        return cached

    def with_precisions(self, prec_chol: Array) -> GaussianParams:
        """Return self, its :meth:`precision_cholesky` known to be ``prec_chol``."""
        object.__setattr__(self, "_prec_chol", prec_chol)
        return self

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "_prec_chol"}  # derived: not saved

    def subset(self, keep: Sequence[int]) -> GaussianParams:
        """The components ``keep`` (in that order), their weights renormalised."""
        w = self.weights[list(keep)]
        out = GaussianParams(
            w / w.sum() if len(w) else w, self.means[list(keep)], self.covariances[list(keep)]
        )
        cached = self.known_precisions
        return out if cached is None else out.with_precisions(cached[list(keep)])


def gaussian_parameters(X: Array, resp: Array, reg_covar: float = REG_COVAR) -> GaussianParams:
    """M-step: the weighted means and covariances of Equation 2 [A §3.1].

    Args:
        X: (n, d) points.
        resp: (n, k) responsibilities gamma(z_ik).
        reg_covar: added to every covariance diagonal.

    Returns:
        The parameters, with weights = N_k / n (N_k = Σ_i gamma_ik, plus scikit-learn's 10·eps).
    """
    return EM(np.asarray(X, dtype=np.float64), reg_covar).m_step(np.asarray(resp, np.float64))


def soft_assign(
    posterior: NDArray[np.floating], threshold: float, allowed: NDArray[np.bool_] | None = None
) -> NDArray[np.bool_]:
    """Return (n, k) memberships: posterior > threshold, plus each row's most probable component.

    RAPTOR's soft clustering [R §3]: a node belongs to every cluster whose posterior exceeds the
    threshold; we also always keep its argmax, so that no node is left without a cluster.

    Args:
        posterior: (n, k) posteriors.
        threshold: the papers' 0.1.
        allowed: (k,) components that may receive points (None: all).
    """
    if allowed is not None:
        posterior = np.where(allowed, posterior, -1.0)
    assigned = np.asarray(posterior > threshold)
    assigned[np.arange(len(posterior)), np.argmax(posterior, axis=1)] = True
    return assigned


def precision_cholesky(covariances: Array) -> Array:
    """Return (k, d, d) upper-triangular P with P Pᵀ = Σ⁻¹ (sklearn's ``precisions_cholesky_``).

    Raises:
        numpy.linalg.LinAlgError: a covariance is not positive definite.
    """
    lower = np.linalg.cholesky(covariances)
    return np.asarray(np.linalg.inv(lower).transpose(0, 2, 1), dtype=np.float64)


def responsibilities(
    X: NDArray[np.floating], params: GaussianParams
) -> tuple[float, NDArray[np.float64]]:
    """E-step: return the mean log-likelihood of X and its (n, k) posteriors gamma(z_ik) (Eq. 1)."""
    return EM(np.asarray(X, dtype=np.float64), REG_COVAR).e_step(params)


#: The parameters of the fitted mixtures :func:`most_probable` has evaluated, kept while they live.
_PARAMS_OF: weakref.WeakKeyDictionary[GaussianMixture, GaussianParams] = weakref.WeakKeyDictionary()


def predict_blocks(gmm: GaussianMixture, X: NDArray[np.floating]) -> NDArray[np.intp]:
    """``gmm.predict(X)``, a block of rows at a time: the same labels, but scikit-learn's
    (n, k) float64 log-probabilities held for one block (a layer of 1M nodes under a global
    mixture of a few hundred components: gigabytes at once)."""
    parts = [gmm.predict(X[i : i + PREDICT_BLOCK]) for i in range(0, len(X), PREDICT_BLOCK)]
    return np.concatenate(parts).astype(np.intp, copy=False) if parts else np.zeros(0, np.intp)


def most_probable(
    gmm: GaussianMixture, X: NDArray[np.floating], allowed: NDArray[np.intp]
) -> NDArray[np.intp]:
    """``argmax(gmm.predict_proba(X)[:, allowed])`` without scikit-learn's Python loop over the
    components (~3 ms a call against a layer's global mixture of a few hundred)."""
    params = _PARAMS_OF.get(gmm)
    if params is None:
        params = params_of(gmm).with_precisions(
            np.asarray(gmm.precisions_cholesky_, dtype=np.float64)
        )
        _PARAMS_OF[gmm] = params
    weighted = EM(np.asarray(X, dtype=np.float64), REG_COVAR).weighted_log_prob(params)
    return np.asarray(np.argmax(weighted[:, allowed], axis=1), dtype=np.intp)


@dataclass
class EMFit:
    """One EM run's result: the parameters, whether and when it converged, its bound."""

    params: GaussianParams
    converged: bool
    n_iter: int
    lower_bound: float
    reg_covar: float

    def to_sklearn(
        self, *, max_iter: int, tol: float, random_state: int | None = None
    ) -> GaussianMixture:
        gmm = to_sklearn(
            self.params,
            reg_covar=self.reg_covar,
            max_iter=max_iter,
            tol=tol,
            random_state=random_state,
        )
        gmm.converged_ = self.converged
        gmm.n_iter_ = self.n_iter
        gmm.lower_bound_ = self.lower_bound
        return gmm


class EM:
    """EM on fixed points, with the quadratic forms as one matrix product per iteration.

    (x-μ)ᵀΛ(x-μ) = vec(x xᵀ)·vec(Λ) - 2 xᵀΛμ + μᵀΛμ, so with the (n, d²) outer products of the
    points computed once, an E-step is an (n, d²) x (d², k) product, and the M-step's weighted
    scatter matrices are a (k, n) x (n, d²) product. scikit-learn loops over components instead
    and builds (n, d) temporaries for each. Points are centred first so the cancellation in these
    expansions stays far below ``reg_covar``.
    """

    def __init__(self, X: Array, reg_covar: float) -> None:
        self.n, self.d = X.shape
        self.reg_covar = reg_covar
        self.center = X.mean(axis=0)
        self.Xc = X - self.center
        self.XX = (self.Xc[:, :, None] * self.Xc[:, None, :]).reshape(self.n, self.d * self.d)

    def m_step(self, resp: Array) -> GaussianParams:
        nk = resp.sum(axis=0) + 10 * np.finfo(np.float64).eps
        means_c = (resp.T @ self.Xc) / nk[:, None]
        second = (resp.T @ self.XX).reshape(-1, self.d, self.d) / nk[:, None, None]
        cov = second - means_c[:, :, None] * means_c[:, None, :]
        cov = 0.5 * (cov + cov.transpose(0, 2, 1))  # exact symmetry for the Cholesky factorisation
        cov[:, np.arange(self.d), np.arange(self.d)] += self.reg_covar
        return GaussianParams(nk / self.n, means_c + self.center, cov)

    def weighted_log_prob(self, params: GaussianParams) -> Array:
        """Return the (n, k) log π_k N(x_i | μ_k, Σ_k)."""
        prec_chol = params.precision_cholesky()
        precision = np.matmul(prec_chol, prec_chol.transpose(0, 2, 1))
        means_c = params.means - self.center
        lam_mu = np.einsum("kij,kj->ki", precision, means_c)
        quad = (
            self.XX @ precision.reshape(-1, self.d * self.d).T
            - 2.0 * (self.Xc @ lam_mu.T)
            + np.einsum("ki,ki->k", means_c, lam_mu)
        )
        log_det = np.log(np.diagonal(prec_chol, axis1=1, axis2=2)).sum(axis=1)
        log_gauss = -0.5 * (self.d * np.log(2 * np.pi) + np.maximum(quad, 0.0)) + log_det
        return np.asarray(log_gauss + np.log(params.weights))

    def e_step(self, params: GaussianParams) -> tuple[float, Array]:
        """Return the mean log-likelihood and the (n, k) responsibilities."""
        weighted = self.weighted_log_prob(params)
        # logsumexp by hand: scipy's costs as much as the rest of the iteration, and the
        # exponentials computed here are the responsibilities' numerators.
        top = weighted.max(axis=1, keepdims=True)
        numer = np.exp(weighted - top)
        total = numer.sum(axis=1, keepdims=True)
        return float((top + np.log(total)).mean()), numer / total

    def run(
        self, init: GaussianParams | NDArray[np.floating], *, max_iter: int, tol: float
    ) -> EMFit:
        start = init if isinstance(init, GaussianParams) else self.m_step(np.asarray(init, float))
        params = start
        lower_bound = -np.inf
        converged = False
        n_iter = 0
        # scikit-learn's loop: E-step, M-step, stop when the E-step's mean log-likelihood moved
        # by less than tol.
        while n_iter < max_iter:
            n_iter += 1
            previous = lower_bound
            lower_bound, resp = self.e_step(params)
            params = self.m_step(resp)
            params = GaussianParams(
                params.weights / params.weights.sum(), params.means, params.covariances
            )
            if abs(lower_bound - previous) < tol:
                converged = True
                break
        return EMFit(params, converged, n_iter, lower_bound, self.reg_covar)

    def bic(self, params: GaussianParams) -> float:
        """scikit-learn's ``GaussianMixture.bic`` for full covariances."""
        return self.bic_of(self.e_step(params)[0], params)

    def bic_of(self, mean_log_lik: float, params: GaussianParams) -> float:
        """BIC from the mean log-likelihood ``e_step(params)`` returned."""
        k, d = params.means.shape
        n_params = k * d * (d + 1) / 2 + k * d + k - 1
        return float(-2 * mean_log_lik * self.n + n_params * np.log(self.n))


def to_sklearn(
    params: GaussianParams,
    *,
    reg_covar: float = REG_COVAR,
    max_iter: int = 100,
    tol: float = TOL,
    random_state: int | None = None,
) -> GaussianMixture:
    """Wrap parameters in a fitted ``GaussianMixture`` (``predict_proba``, ``bic``, pickling)."""
    from sklearn.mixture import GaussianMixture  # ~1.5 s to import: not for `adrap status`

    k, d = params.means.shape
    gmm = GaussianMixture(
        n_components=k,
        covariance_type="full",
        reg_covar=reg_covar,
        max_iter=max_iter,
        tol=tol,
        random_state=random_state,
    )
    prec_chol = precision_cholesky(params.covariances)
    gmm.weights_ = params.weights
    gmm.means_ = params.means
    gmm.covariances_ = params.covariances
    gmm.precisions_cholesky_ = prec_chol
    gmm.precisions_ = np.matmul(prec_chol, prec_chol.transpose(0, 2, 1))
    gmm.n_features_in_ = d
    gmm.converged_ = True
    gmm.n_iter_ = 0
    gmm.lower_bound_ = -np.inf
    return gmm


def params_of(gmm: GaussianMixture) -> GaussianParams:
    """Return the parameters of a fitted full-covariance ``GaussianMixture``, as float64."""
    return GaussianParams(
        np.asarray(gmm.weights_, dtype=np.float64),
        np.asarray(gmm.means_, dtype=np.float64),
        np.asarray(gmm.covariances_, dtype=np.float64),
    )
