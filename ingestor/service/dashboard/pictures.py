"""The 2-D map of a layer, and the picture and maps of one tree cached per tree version.

The map is a PCA of the layer's stored vectors: the two directions along which the layer's nodes
differ most, fitted on at most :data:`PCA_SAMPLE` of them (seeded, so the same tree gives the same
picture) and every node projected. Why not the tree's own UMAP: it is fitted in
``cluster.n_components`` (10) dimensions, not 2, and only on the nodes of its last refit; a 2-D
UMAP of a 100k-node layer takes minutes. PCA costs reading the vectors (~3 s for 83k leaves
from the embedded store) and well under a second of arithmetic, once per tree version. Distances
on it are coarse (two of 384 dimensions), so it shows how the nodes group and where a query's
hits and the last update fall, not which nodes are nearest.

JSON of a map (``xy``: uint16 pairs in base64, ``x`` then ``y`` per node; 0..65535 spans the
layer with one scale for both axes, so shapes are not stretched)::

    {"layer", "version", "start", "count", "xy", "explained": [r1, r2], "sampled": m}

``start``/``count`` are the layer's place in the picture's order, so map point ``k`` is picture
node ``start + k``.

Who may read what (issue 53): a caller's picture and maps are of the nodes it may read
(``readable``), laid out as if the others were not there; each set of readable classes has its own,
cached alike (the last :data:`KEPT` of them).
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from ingestor.service.dashboard.picture import (
    Layout,
    Touched,
    b64,
    lay_out,
    picture_json,
    read_nodes,
)
from retriever import F, NodeStore

log = logging.getLogger(__name__)

#: Rows the PCA is fitted on at most (every node is projected).
PCA_SAMPLE: Final = 4096
#: Vectors per store call.
VECTOR_BATCH: Final = 2048
#: Largest value of a map coordinate.
GRID: Final = 65535
#: Pictures kept, one per set of readable classes (callers who read the same share one).
KEPT: Final = 8


def project(vectors: NDArray[np.float32], seed: int = 0) -> tuple[NDArray[np.uint16], list[float]]:
    """Return the 2-D PCA of ``vectors`` quantised to 0..GRID, and each axis's share of variance.

    Args:
        vectors: ``(n, dim)``.
        seed: picks the rows the PCA is fitted on when there are more than :data:`PCA_SAMPLE`.
    """
    n = len(vectors)
    if n == 0:
        return np.zeros((0, 2), dtype=np.uint16), [0.0, 0.0]
    x = np.asarray(vectors, dtype=np.float32)
    rows = x if n <= PCA_SAMPLE else x[np.random.default_rng(seed).choice(n, PCA_SAMPLE, False)]
    mean = rows.mean(axis=0)
    centred = (rows - mean).astype(np.float64)
    # eigenvectors of the dim x dim covariance: cheaper than an SVD of the sample
    var, vec = np.linalg.eigh(centred.T @ centred)
    var, vec = np.clip(var[::-1], 0, None), vec[:, ::-1]
    comps = np.zeros((2, x.shape[1]), dtype=np.float32)
    comps[: min(2, vec.shape[1])] = vec[:, :2].T
    # a fixed sign per axis (SVD's is arbitrary): the largest coefficient is positive
    signs = np.sign(comps[np.arange(2), np.abs(comps).argmax(axis=1)])
    comps *= np.where(signs == 0, 1, signs)[:, None]
    xy = (x - mean) @ comps.T
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    span = float((hi - lo).max())
    scaled = (xy - (lo + hi) / 2) / (span if span > 0 else 1.0) * GRID + GRID / 2
    total = float(var.sum())
    share = [float(var[k]) / total if total > 0 and k < len(var) else 0.0 for k in range(2)]
    return np.clip(np.rint(scaled), 0, GRID).astype(np.uint16), share


def read_vectors(store: NodeStore, ids: list[str]) -> NDArray[np.float32]:
    """Return the stored vectors of ``ids``, in that order (batches of :data:`VECTOR_BATCH`)."""
    parts = [
        store.retrieve_vectors(ids[s : s + VECTOR_BATCH]) for s in range(0, len(ids), VECTOR_BATCH)
    ]
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def map_json(store: NodeStore, layout: Layout, layer: int, version: str) -> dict[str, Any]:
    """Return the map of ``layer`` (see the module's docstring).

    Raises:
        ValueError: the tree has no such layer.
    """
    start, count = layout.layer_range(layer)
    xy, share = project(read_vectors(store, layout.ids[start : start + count]))
    return {
        F.LAYER: layer,
        "version": version,
        "start": start,
        "count": count,
        "xy": b64(xy.reshape(-1), "<u2"),
        "explained": [round(v, 4) for v in share],
        "sampled": min(count, PCA_SAMPLE),
    }


def default_map_layer(layout: Layout, most: int = 20_000) -> int:
    """Return the layer the page maps first: the leaves, or on a big tree the lowest layer of at
    most ``most`` nodes (its map costs reading that many vectors)."""
    for entry in layout.layers:
        if entry["count"] <= most:
            return entry[F.LAYER]
    return layout.layers[-1][F.LAYER] if layout.layers else 0


def whole_picture(store: NodeStore, tree: str, touched: Touched) -> dict[str, Any]:
    """Return the picture with the map of every layer under ``"maps"`` (``adrap explore``)."""
    layout = lay_out(read_nodes(store, tree))
    out = picture_json(layout, tree, "export", touched)
    out["map_layer"] = default_map_layer(layout)
    out["maps"] = {
        str(e[F.LAYER]): map_json(store, layout, e[F.LAYER], "export") for e in layout.layers
    }
    return out


@dataclass(frozen=True)
class Encoded:
    """A JSON answer, encoded once: plain and gzipped."""

    raw: bytes
    gz: bytes

    @classmethod
    def of(cls, out: Any) -> Encoded:
        raw = json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return cls(raw, gzip.compress(raw, compresslevel=5))


@dataclass
class _Version:
    version: str
    layout: Layout
    picture: Encoded
    maps: dict[int, Encoded] = field(default_factory=dict)


class Pictures:
    """The picture and maps of tree ``tree`` in ``store``, computed once per tree version and
    set of readable classes.

    One lock: a second request for the same version waits for the first instead of reading the
    tree again. The version is the caller's (the daemon: its last update); a picture computed
    while an update lands keeps the version read before it, so the next request recomputes.
    """

    def __init__(self, store: NodeStore, tree: str) -> None:
        self.store = store
        self.tree = tree
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, ...] | None, _Version] = {}

    def _at(self, version: str, touched: Touched, readable: tuple[str, ...] | None) -> _Version:
        cur = self._kept.get(readable)
        if cur is None or cur.version != version:
            t0 = time.perf_counter()
            layout = lay_out(read_nodes(self.store, self.tree, readable))
            out = picture_json(layout, self.tree, version, touched)
            out["map_layer"] = default_map_layer(layout)
            cur = _Version(version, layout, Encoded.of(out))
            self._kept.pop(readable, None)
            self._kept[readable] = cur  # the newest last
            while len(self._kept) > KEPT:
                del self._kept[next(iter(self._kept))]
            log.info(
                "dashboard picture of tree %r: %d nodes in %.1f s (%d kB)",
                self.tree,
                len(layout.ids),
                time.perf_counter() - t0,
                len(cur.picture.raw) // 1000,
            )
        return cur

    def picture(
        self, version: str, touched: Touched, readable: tuple[str, ...] | None = None
    ) -> Encoded:
        """Return the picture's JSON at ``version`` (computed if the cached one is older) of
        the nodes a caller who may read ``readable`` may read (None: every node)."""
        with self._lock:
            return self._at(version, touched, readable).picture

    def map(
        self,
        version: str,
        touched: Touched,
        layer: int,
        readable: tuple[str, ...] | None = None,
    ) -> Encoded:
        """Return the map of ``layer`` at ``version``, of the nodes a caller who may read
        ``readable`` may read.

        Raises:
            ValueError: the tree has no such layer.
        """
        with self._lock:
            cur = self._at(version, touched, readable)
            if layer not in cur.maps:
                cur.maps[layer] = Encoded.of(map_json(self.store, cur.layout, layer, version))
            return cur.maps[layer]
