"""The online GMMs of a clustered layer in the state database, by parts (see
:mod:`ingestor.tree.layer_store`): a head row per group (memberships, point order, weights and
scalars), one row per point (written once) and one row per component (written when it moved).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ingestor.cluster.gmm import GaussianParams
from ingestor.cluster.incremental import PointBuffer
from ingestor.cluster.online_gmm import OnlineGMM
from ingestor.tree.rowmap import RowMap, dumps, loads
from models_store import Changes, RowStore


class GroupMap(RowMap[Any]):
    """The online GMMs of a layer (one key per global cluster; None for a guarded group), stored
    by parts so that a commit writes the points and components an update changed, not the group.

    What was last written is remembered per group (its point ids, a digest of each component
    and of the head); a commit writes the difference. Values handed out are written back (they
    change in place), so an unchanged group costs one head digest, no bytes.
    """

    def __init__(self, ns: str) -> None:
        super().__init__(ns, mutable=True)
        self._stored: dict[str, _Stored] = {}
        self._pending: dict[str, _Stored] = {}
        self._replaced: set[str] = set()

    @property
    def _pts(self) -> str:
        return f"{self.ns}.pts"

    @property
    def _comp(self) -> str:
        return f"{self.ns}.comp"

    def namespaces(self) -> list[str]:
        return [self.ns, self._pts, self._comp]

    def bind(self, rows: RowStore) -> None:
        super().bind(rows)
        self._stored.clear()
        self._replaced.clear()

    def _forget(self, keys: list[str]) -> None:
        for key in keys:  # read again, described again (by _decode)
            self._stored.pop(key, None)

    def __setitem__(self, key: str, value: Any) -> None:
        # A new model for the group (a refit, a promotion): its point ids may repeat the old
        # model's for other points, so every point is written again.
        super().__setitem__(key, value)
        self._replaced.add(key)

    def _decode(self, key: str, data: bytes) -> OnlineGMM | None:
        head: Any = loads(data)
        if isinstance(head, OnlineGMM):  # pickled whole (before groups were stored by parts)
            self._stored[key] = _Stored(b"", set(), {})  # its next commit writes it by parts
            return head
        if head is None:
            self._stored[key] = _Stored(hashlib.blake2b(data).digest(), set(), {})
            return None
        assert self._rows is not None
        order: list[int] = head.pop("_order")
        weights = head.pop("_weights")
        dim = int(head.pop("_dim"))
        pts = {
            int(k.rsplit("/", 1)[1]): v for k, v in self._rows.items_prefix(self._pts, key + "/")
        }
        comps = {
            int(k.rsplit("/", 1)[1]): v for k, v in self._rows.items_prefix(self._comp, key + "/")
        }
        X = np.zeros((len(order), dim))
        for r, pid in enumerate(order):
            X[r] = np.frombuffer(pts[pid], dtype=np.float64)
        k = len(head["cluster_ids"])
        means, covs = np.zeros((k, dim)), np.zeros((k, dim, dim))
        for j, cid in enumerate(head["cluster_ids"]):
            flat = np.frombuffer(comps[cid], dtype=np.float64)
            means[j], covs[j] = flat[:dim], flat[dim:].reshape(dim, dim)
        head["_points"] = PointBuffer(X, list(order))
        head["params"] = GaussianParams(np.asarray(weights, dtype=np.float64), means, covs)
        gmm = OnlineGMM.__new__(OnlineGMM)
        gmm.__setstate__(head)  # its defaults for fields added since the row was written
        self._stored[key] = _Stored(
            hashlib.blake2b(data).digest(),
            set(order),
            {cid: hashlib.blake2b(v).digest() for cid, v in comps.items()},
        )
        return gmm

    def changes(self, out: Changes) -> None:
        if self._cleared:
            out.clear.update(self.namespaces())
        self._pending = {}
        for key in self._dirty:
            if key in self._cache:
                self._write(key, self._cache[key], out)
        for key in self._read - self._dirty - self._deleted:
            out.touch.add((self.ns, key))

    def _stored_of(self, key: str) -> _Stored | None:
        """What the database holds of group ``key`` (read when this map never loaded it)."""
        if self._cleared or self._rows is None:
            return None
        if key not in self._stored:
            pts = {
                int(k.rsplit("/", 1)[1]) for k, _ in self._rows.items_prefix(self._pts, key + "/")
            }
            comps = {
                int(k.rsplit("/", 1)[1]): hashlib.blake2b(v).digest()
                for k, v in self._rows.items_prefix(self._comp, key + "/")
            }
            self._stored[key] = _Stored(b"", pts, comps)
        return self._stored[key]

    def _write(self, key: str, gmm: OnlineGMM | None, out: Changes) -> None:
        old = self._stored_of(key)
        if gmm is None:
            head = dumps(None)
            digest = hashlib.blake2b(head).digest()
            if old is None or old.head != digest:
                out.set(self.ns, key, head)
            for pid in old.points if old is not None else ():
                out.remove(self._pts, f"{key}/{pid}")
            for cid in old.comps if old is not None else ():
                out.remove(self._comp, f"{key}/{cid}")
            self._pending[key] = _Stored(digest, set(), {})
            return
        params = gmm.params
        ids = list(gmm._points.ids)
        fields = {k: v for k, v in gmm.__dict__.items() if k not in ("_points", "params")}
        head = dumps(
            fields | {"_order": ids, "_weights": params.weights, "_dim": params.means.shape[1]}
        )
        digest = hashlib.blake2b(head).digest()
        if old is None or old.head != digest:
            out.set(self.ns, key, head)
        X = gmm._points.view()
        known = old.points if old is not None else set()
        fresh = key in self._replaced
        for r, pid in enumerate(ids):
            if fresh or pid not in known:
                out.set(self._pts, f"{key}/{pid}", X[r].astype(np.float64).tobytes())
        now = set(ids)
        for pid in known - now:
            out.remove(self._pts, f"{key}/{pid}")
        comps: dict[int, bytes] = {}
        for j, cid in enumerate(gmm.cluster_ids):
            blob = np.concatenate([params.means[j], params.covariances[j].ravel()]).tobytes()
            h = hashlib.blake2b(blob).digest()
            comps[cid] = h
            if old is None or old.comps.get(cid) != h:
                out.set(self._comp, f"{key}/{cid}", blob)
        for cid in (old.comps if old is not None else {}).keys() - comps.keys():
            out.remove(self._comp, f"{key}/{cid}")
        self._pending[key] = _Stored(digest, now, comps)

    def committed(self) -> None:
        super().committed()
        self._stored.update(self._pending)
        self._pending = {}
        self._replaced.clear()


@dataclass
class _Stored:
    """What the database holds of one group: digests of its head and components, its points."""

    head: bytes
    points: set[int]
    comps: dict[int, bytes]
