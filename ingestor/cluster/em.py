"""Fitting a full-covariance Gaussian mixture with :class:`~ingestor.cluster.gmm.EM`: from given
parameters or responsibilities (:func:`run_em`), from k-means labels (:func:`fit_gmm`), and its
BIC (:func:`bic`); see :mod:`ingestor.cluster.gmm` for why it is not scikit-learn's own loop."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.gmm import EM, REG_COVAR, TOL, Array, EMFit, GaussianParams
from ingestor.cluster.kmeans import kmeans_labels

if TYPE_CHECKING:
    from sklearn.mixture import GaussianMixture

log = logging.getLogger(__name__)

__all__ = ["bic", "fit_from_kmeans", "fit_gmm", "run_em"]


def bic(X: NDArray[np.floating], params: GaussianParams) -> float:
    """Return the BIC of a full-covariance mixture on X (scikit-learn's ``GaussianMixture.bic``)."""
    return EM(np.asarray(X, dtype=np.float64), REG_COVAR).bic(params)


def run_em(
    X: NDArray[np.floating],
    init: GaussianParams | NDArray[np.floating],
    *,
    reg_covar: float = REG_COVAR,
    max_iter: int = 100,
    tol: float = TOL,
) -> GaussianMixture:
    """Run EM to convergence from initial parameters or responsibilities.

    Args:
        X: (n, d) points.
        init: starting parameters (a warm start, as in adRAP's Algorithm 2) or (n, k)
            responsibilities (one-hot k-means labels for a cold start, as scikit-learn does).
        reg_covar: added to every covariance diagonal.
        max_iter: EM iterations (≥ 1).
        tol: convergence threshold on the change of the mean log-likelihood.

    Returns:
        A fitted ``GaussianMixture`` (``converged_`` says whether ``tol`` was reached).

    Raises:
        numpy.linalg.LinAlgError: a covariance became singular (not with ``reg_covar`` > 0 in
            practice).
    """
    fit = EM(np.asarray(X, dtype=np.float64), reg_covar).run(init, max_iter=max_iter, tol=tol)
    return fit.to_sklearn(max_iter=max_iter, tol=tol)


def fit_gmm(
    Y: NDArray[np.floating],
    k: int,
    *,
    random_state: int | None,
    max_iter: int = 100,
    reg_covar: float = REG_COVAR,
) -> GaussianMixture:
    """Fit a k-component mixture from scratch, initialised like scikit-learn (k-means labels).

    Args:
        Y: (n, c) points, n ≥ k.
        k: number of components.
        random_state: seed of the k-means initialisation.
        max_iter: EM iterations.
        reg_covar: added to every covariance diagonal.

    Returns:
        The fitted ``GaussianMixture``: the same algorithm as
        ``GaussianMixture(k, random_state=random_state).fit(Y)`` (k-means start, EM), with its
        own k-means seeding, so not the same floating-point result.
    """
    em = EM(np.asarray(Y, dtype=np.float64), reg_covar)
    fit = fit_from_kmeans(em, np.asarray(Y, dtype=np.float64), k, random_state, max_iter)
    return fit.to_sklearn(max_iter=max_iter, tol=TOL, random_state=random_state)


def fit_from_kmeans(em: EM, Y: Array, k: int, random_state: int | None, max_iter: int) -> EMFit:
    resp = np.zeros((len(Y), k))
    resp[np.arange(len(Y)), kmeans_labels(Y, k, random_state=random_state)] = 1.0
    fit = em.run(resp, max_iter=max_iter, tol=TOL)
    if not fit.converged:
        log.debug(
            "GMM with k=%d did not converge in %d iterations on %d points", k, max_iter, len(Y)
        )
    return fit
