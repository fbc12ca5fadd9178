"""Fingerprints of the vector a summary's point was placed from (see ``AdaptiveLayer.placed``)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["same_digest", "vector_digest"]


def vector_digest(x: NDArray[np.floating]) -> tuple[float, ...]:
    """Return a short fingerprint of an embedding (records which vector a point was placed from).

    The first components of the unit vector, rounded: a store that normalises or re-encodes
    vectors (Qdrant does, for cosine) returns a vector with the same fingerprint within 1e-3,
    while another summary's vector differs far more. Compare with :func:`same_digest`.
    """
    v = np.asarray(x, dtype=np.float64).ravel()
    v = v / max(float(np.linalg.norm(v)), 1e-12)
    return tuple(round(float(t), 5) for t in v[:8])


def same_digest(a: tuple[float, ...] | None, b: tuple[float, ...]) -> bool:
    """Return whether two fingerprints of :func:`vector_digest` name the same vector."""
    return a is not None and len(a) == len(b) and bool(np.allclose(a, b, atol=1e-3))
