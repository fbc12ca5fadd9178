"""The online GMMs of a clustered layer in the state database, by parts (see
:mod:`ingestor.tree.layer_store`): a head row per group (memberships, point order, weights and
scalars), its points in packed blocks plus one row per point added since (written once), and one
row per component (written when it moved).

Points are packed because an update reads whole groups: one row per point made a one-document
remove at 265k synthetic leaves read ~2,600 point rows (its chunks' ~5 groups of ~600 points,
0.8 ms a group of the ~40 ms the remove cost), against a few dozen at 2.7k leaves, where groups
are small. A group's points are packed again into one block once its single rows and the blocks'
entries for removed points pass ``max(PACK_MIN, n / PACK_SHARE)``: a point is rewritten once per
``n / PACK_SHARE`` changes of its group, on average a few bytes per change.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.gmm import GaussianParams
from ingestor.cluster.online_gmm import OnlineGMM, PointBuffer
from ingestor.tree.rowmap import Clock, RowMap, dumps, loads_model
from models_store import Changes, IncompatibleModelError, ModelStoreError, RowStore

#: A group's points are packed again into one block once more than ``max(PACK_MIN, n //
#: PACK_SHARE)`` of them are single rows or removed points still in a block (see the module).
PACK_MIN: Final = 32
PACK_SHARE: Final = 4


class GroupMap(RowMap[Any]):
    """The online GMMs of a layer (one key per global cluster; None for a guarded group), stored
    by parts so that a commit writes the points and components an update changed, not the group.

    What was last written is remembered per group (its point ids, a digest of each component
    and of the head); a commit writes the difference for each group set or taken to change
    (``edit``: an online GMM changes in place as points come and go), so a group taken and left
    as it was costs one head digest, no bytes.
    """

    def __init__(self, ns: str, clock: Clock) -> None:
        super().__init__(ns, clock)
        self._stored: dict[str, _Stored] = {}
        self._pending: dict[str, _Stored] = {}
        self._replaced: set[str] = set()

    @property
    def _pts(self) -> str:
        return f"{self.ns}.pts"

    @property
    def _comp(self) -> str:
        return f"{self.ns}.comp"

    @property
    def _blk(self) -> str:
        return f"{self.ns}.blk"

    def namespaces(self) -> list[str]:
        return [self.ns, *side_namespaces(self.ns)]

    def bind(self, rows: RowStore) -> None:
        super().bind(rows)
        self._stored.clear()
        self._replaced.clear()

    def _forget(self, keys: list[str]) -> None:
        for key in keys:  # read again, described again (by _decode)
            self._stored.pop(key, None)

    def _fingerprint(self, value: OnlineGMM | None) -> bytes:
        """What a commit would write of a group, but the id counter its layer shares with all of
        its groups (linked again when read: :func:`~ingestor.tree.layer_store.open_layer`)."""
        if value is None:
            return b""
        h = hashlib.blake2b(digest_size=16)
        fields = {k: v for k, v in value.stored_fields().items() if k != "ids"}
        h.update(dumps(fields | {"_order": list(value.buffer.ids)}))
        params = value.params
        for part in (params.weights, params.means, params.covariances, value.buffer.view()):
            h.update(np.ascontiguousarray(part, dtype=np.float64).tobytes())
        return h.digest()

    def __setitem__(self, key: str, value: Any) -> None:
        # A new model for the group (a refit, a promotion): its point ids may repeat the old
        # model's for other points, so every point is written again.
        super().__setitem__(key, value)
        self._replaced.add(key)

    def _decode(self, key: str, data: bytes) -> OnlineGMM | None:
        head: Any = loads_model(data, f"the online GMM {self.ns}/{key}")
        if isinstance(head, OnlineGMM):  # pickled whole (before groups were stored by parts)
            self._stored[key] = _Stored(b"", set(), {})  # its next commit writes it by parts
            return head
        if head is None:
            self._stored[key] = _Stored(hashlib.blake2b(data).digest(), set(), {})
            return None
        assert self.store is not None
        order: list[int] = head.pop("_order")
        weights = head.pop("_weights")
        dim = int(head.pop("_dim"))
        comps = {
            int(k.rsplit("/", 1)[1]): v for k, v in self.store.items_prefix(self._comp, key + "/")
        }
        X, singles, blocks = self._read_points(key, order, dim)
        k = len(head["cluster_ids"])
        means, covs = np.zeros((k, dim)), np.zeros((k, dim, dim))
        for j, cid in enumerate(head["cluster_ids"]):
            flat = np.frombuffer(comps[cid], dtype=np.float64)
            means[j], covs[j] = flat[:dim], flat[dim:].reshape(dim, dim)
        params = GaussianParams(np.asarray(weights, dtype=np.float64), means, covs)
        gmm = OnlineGMM.restore(head, PointBuffer(X, list(order)), params)
        self._stored[key] = _Stored(
            hashlib.blake2b(data).digest(),
            singles,
            {cid: hashlib.blake2b(v).digest() for cid, v in comps.items()},
            blocks,
        )
        return gmm

    def _read_points(
        self, key: str, order: list[int], dim: int
    ) -> tuple[NDArray[np.float64], set[int], dict[str, _Block]]:
        """Read group ``key``'s points in ``order``: its blocks, then its single rows (a point
        written after a block was is taken from its own row)."""
        assert self.store is not None
        at = {pid: r for r, pid in enumerate(order)}
        X = np.zeros((len(order), dim))
        found = np.zeros(len(order), dtype=bool)
        blocks: dict[str, _Block] = {}
        for bkey, blob in self.store.items_prefix(self._blk, key + "/"):
            ids, P = unpack(blob)
            rows = np.array([at.get(pid, -1) for pid in ids.tolist()], dtype=np.intp)
            live = rows >= 0
            if live.any():
                X[rows[live]], found[rows[live]] = P[live], True
            blocks[bkey] = _Block(len(ids), set(ids[live].tolist()))
        singles = set()
        for pkey, v in self.store.items_prefix(self._pts, key + "/"):
            pid = int(pkey.rsplit("/", 1)[1])
            singles.add(pid)  # one of a removed point (none should be) goes with the next write
            if pid in at:
                X[at[pid]], found[at[pid]] = np.frombuffer(v, dtype=np.float64), True
        for block in blocks.values():  # a single row serves its point, not the block
            block.serves -= singles
        if not found.all():
            missing = [order[r] for r in np.flatnonzero(~found)[:3]]
            raise ModelStoreError(
                f"the state database {self.store.path} lacks point(s) {missing} of group {key} "
                f"of {self.ns}: it is damaged; delete it and run `adrap build DIR` to rebuild"
            )
        return X, singles, blocks

    def changes(self, out: Changes) -> None:
        self._pending = {}
        super().changes(out)  # each changed group through write_row

    def _stored_of(self, key: str) -> _Stored | None:
        """What the database holds of group ``key`` (read when this map never loaded it)."""
        if self.cleared or self.store is None:
            return None
        if key not in self._stored:
            data = self.store.get(self.ns, key)
            try:
                head = loads_model(data, f"{self.ns}/{key}") if data is not None else None
            except IncompatibleModelError:  # refitted: every row beside it is listed, to go
                head = None
            order, dim = (head["_order"], int(head["_dim"])) if isinstance(head, dict) else ([], 0)
            _, singles, blocks = self._read_points(key, order, dim)
            comps = {
                int(k.rsplit("/", 1)[1]): hashlib.blake2b(v).digest()
                for k, v in self.store.items_prefix(self._comp, key + "/")
            }
            self._stored[key] = _Stored(b"", singles, comps, blocks)
        return self._stored[key]

    def write_row(self, key: str, gmm: OnlineGMM | None, out: Changes) -> None:
        """Write group ``key``'s head, the points and components the database lacks."""
        old = self._stored_of(key)
        if gmm is None:
            head = dumps(None)
            digest = hashlib.blake2b(head).digest()
            if old is None or old.head != digest:
                out.set(self.ns, key, head)
            if old is not None:
                self._remove_points(key, old, out)
            for cid in old.comps if old is not None else ():
                out.remove(self._comp, f"{key}/{cid}")
            self._pending[key] = _Stored(digest, set(), {})
            return
        params = gmm.params
        ids = list(gmm.buffer.ids)
        fields = gmm.stored_fields()
        head = dumps(
            fields | {"_order": ids, "_weights": params.weights, "_dim": params.means.shape[1]}
        )
        digest = hashlib.blake2b(head).digest()
        if old is None or old.head != digest:
            out.set(self.ns, key, head)
        singles, blocks = self._write_points(key, ids, gmm.buffer.view(), old, out)
        comps: dict[int, bytes] = {}
        for j, cid in enumerate(gmm.cluster_ids):
            blob = np.concatenate([params.means[j], params.covariances[j].ravel()]).tobytes()
            h = hashlib.blake2b(blob).digest()
            comps[cid] = h
            if old is None or old.comps.get(cid) != h:
                out.set(self._comp, f"{key}/{cid}", blob)
        for cid in (old.comps if old is not None else {}).keys() - comps.keys():
            out.remove(self._comp, f"{key}/{cid}")
        self._pending[key] = _Stored(digest, singles, comps, blocks)

    def _write_points(
        self,
        key: str,
        ids: list[int],
        X: NDArray[np.floating],
        old: _Stored | None,
        out: Changes,
    ) -> tuple[set[int], dict[str, _Block]]:
        """Write the points (``ids``, rows of ``X``) of group ``key`` that the database lacks (one
        row each), or all of them as one block when a pack is due; return what it then holds."""
        now = set(ids)
        was = old if old is not None else _Stored(b"", set(), {})
        fresh = old is None or key in self._replaced  # every point is written again
        singles = set() if fresh else was.points & now
        left = {} if fresh else {k: _Block(b.size, b.serves & now) for k, b in was.blocks.items()}
        held = singles.union(*(b.serves for b in left.values()))
        new = [r for r, pid in enumerate(ids) if pid not in held]
        dead = sum(b.size - len(b.serves) for b in left.values())
        if fresh or len(singles) + len(new) + dead > max(PACK_MIN, len(ids) // PACK_SHARE):
            self._remove_points(key, was, out)
            if not ids:
                return set(), {}
            bkey = f"{key}/{_next_block(was.blocks)}"
            out.set(self._blk, bkey, pack(np.asarray(ids, dtype=np.int64), X))
            return set(), {bkey: _Block(len(ids), now)}
        for r in new:
            out.set(self._pts, f"{key}/{ids[r]}", X[r].astype(np.float64).tobytes())
        for pid in was.points - now:
            out.remove(self._pts, f"{key}/{pid}")
        for bkey in [bkey for bkey, b in left.items() if not b.serves]:
            out.remove(self._blk, bkey)  # every point it held is gone
            del left[bkey]
        return singles | {ids[r] for r in new}, left

    def _remove_points(self, key: str, stored: _Stored, out: Changes) -> None:
        """Delete every point row and block of group ``key`` that ``stored`` lists."""
        for pid in stored.points:
            out.remove(self._pts, f"{key}/{pid}")
        for bkey in stored.blocks:
            out.remove(self._blk, bkey)

    def committed(self) -> None:
        super().committed()
        self._stored.update(self._pending)
        self._pending = {}
        self._replaced.clear()


def side_namespaces(ns: str) -> list[str]:
    """The namespaces beside a layer's group heads ``ns``: single points, blocks, components."""
    return [f"{ns}.pts", f"{ns}.blk", f"{ns}.comp"]


def pack(ids: NDArray[np.int64], X: NDArray[np.floating]) -> bytes:
    """Pack points (ids and rows of X) into one block: count and dimension, ids, float64 rows."""
    head = np.array([len(ids), X.shape[1] if X.ndim == 2 else 0], dtype=np.int64)
    return head.tobytes() + ids.astype(np.int64).tobytes() + np.asarray(X, np.float64).tobytes()


def unpack(blob: bytes) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Return the ids and the (n, dim) points of a block made by :func:`pack`."""
    n, dim = (int(v) for v in np.frombuffer(blob, dtype=np.int64, count=2))
    ids = np.frombuffer(blob, dtype=np.int64, count=n, offset=16)
    X = np.frombuffer(blob, dtype=np.float64, count=n * dim, offset=16 + 8 * n)
    return ids, X.reshape(n, dim)


def _next_block(blocks: dict[str, _Block]) -> int:
    return 1 + max((int(k.rsplit("/", 1)[1]) for k in blocks), default=-1)


@dataclass
class _Block:
    """One stored block of a group: how many points it holds and which of them it still serves
    (the others were removed, or written again as single rows)."""

    size: int
    serves: set[int]


@dataclass
class _Stored:
    """What the database holds of one group: digests of its head and components, its points
    (single rows, and blocks by key)."""

    head: bytes
    points: set[int]
    comps: dict[int, bytes]
    blocks: dict[str, _Block] = field(default_factory=dict)
