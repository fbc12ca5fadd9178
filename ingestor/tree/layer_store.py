"""An adaptive layer in the state database, by parts, so that a commit writes what an update touched.

A clustered layer holds a fitted clusterer (a global UMAP + GMM and one local model per global
cluster), one online GMM per global cluster, and maps from nodes to points and from clusters to
the summaries above. Pickled whole, the layer over the leaves grows with the tree (every point,
every local UMAP's training data) and an update would rewrite all of it. Here each part is its own
row, in namespaces ``L<i>.<part>``:

* ``head``: the layer's scalars (and its id counter) and the clusterer without its local models;
  written when the layer is fitted and, for the scalars, at each commit (a few hundred bytes).
* ``local``: one row per global cluster's local model (written when fitted or re-fitted).
* ``gmms``: per global cluster, its online GMM by parts (:class:`GroupMap`): a head row (the
  memberships, the point order, the weights and scalars: a few bytes a point), its points' reduced
  embeddings packed in ``gmms.blk`` plus one row per point added since in ``gmms.pts`` (see
  :mod:`ingestor.tree.group_rows`) and one row per component in ``gmms.comp`` (mean and
  covariance: written when they changed). An update that adds one point to a group of thousands
  writes that point, the components it moved and the head, not the group.
* per-node and per-cluster maps (``point_of``, ``node_at``, ``cluster_nodes``, ``guarded``, …):
  one row per entry (written when set, deleted or taken to change: ``edit``, see
  :func:`ingestor.cluster.layer_state.edit`).

Opening a layer reads only its head; groups, local models and map entries load on first use.
A fitted model the installed libraries cannot read (pickled by other versions of them) does not
stop the layer from opening: the clusterer is replaced by an :class:`UnreadableClusterer` and a
local model or online GMM raises ``IncompatibleModelError`` when asked for;
:func:`unreadable_models` lists them for the update that refits them
(:mod:`ingestor.tree.model_repair`).
"""

from __future__ import annotations

import functools
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ingestor.tree.group_rows import GroupMap, side_namespaces
from ingestor.tree.model_rows import ModelRows, SpilledModels, relink_local
from ingestor.tree.row_containers import KeyedRowMap, RowList
from ingestor.tree.rowmap import Clock, RowMap, dumps, loads, loads_model
from models_store import Changes, IncompatibleModelError, RowStore

if TYPE_CHECKING:  # imported where a layer is opened: `adrap status` opens none
    from ingestor.cluster.adaptive import AdaptiveLayer

#: Map attributes of an AdaptiveLayer, with how their keys are written.
_MAPS: dict[str, str] = {
    "point_of": "str",
    "node_at": "pair",
    "cluster_nodes": "int",
    "guarded": "int",
    "placed": "str",
    "cluster_group": "int",
}
_LISTS = ("gmms",)


@functools.cache
def _scalar_names() -> frozenset[str]:
    """The other fields of a layer, written in its head's ``scalars`` row (the clusterer has a row)."""
    from ingestor.cluster.adaptive import AdaptiveLayer

    skip = {*_MAPS, *_LISTS, "clusterer", "storage"}
    return frozenset(f.name for f in fields(AdaptiveLayer) if f.name not in skip)


def _blank_layer() -> AdaptiveLayer:
    """An AdaptiveLayer with every field at its default, for :func:`open_layer` to fill."""
    from ingestor.cluster.adaptive import AdaptiveLayer

    al = AdaptiveLayer.__new__(AdaptiveLayer)
    for f in fields(AdaptiveLayer):
        if f.default is not MISSING:
            setattr(al, f.name, f.default)
        elif f.default_factory is not MISSING:
            setattr(al, f.name, f.default_factory())
    return al


class UnreadableClusterer:
    """Stands for a layer's clusterer (global UMAP + GMM) that the installed libraries cannot
    read, until an update refits it; it holds the layer's local models, as a clusterer does.

    Attributes:
        reason: why it could not be read.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.local_models_: Any = None


@dataclass
class ModelDamage:
    """The fitted models of a layer that cannot be read, each with why.

    Attributes:
        head: the clusterer (global UMAP + GMM), or None when it was read.
        local: global cluster → its local model (UMAP + GMM).
        online: global cluster → its online GMM.
    """

    head: str | None = None
    local: dict[int, str] = field(default_factory=dict)
    online: dict[int, str] = field(default_factory=dict)

    def groups(self) -> list[int]:
        """The global clusters whose local model or online GMM must be fitted again."""
        return sorted(self.local.keys() | self.online.keys())

    def reasons(self) -> list[str]:
        """Every reason, the clusterer's first."""
        return (
            [r for r in (self.head,) if r] + list(self.local.values()) + list(self.online.values())
        )

    def __bool__(self) -> bool:
        return bool(self.head or self.local or self.online)


def unreadable_models(al: AdaptiveLayer, *, scan: bool) -> ModelDamage:
    """Return which fitted models of layer ``al`` cannot be read.

    Args:
        scan: read every local model and online GMM of a stored layer (O(layer): once after a
            library upgrade); else only the clusterer, read when the layer was opened, counts.
    """
    damage = ModelDamage()
    if isinstance(al.clusterer, UnreadableClusterer):
        damage.head = al.clusterer.reason
    if not scan or not isinstance(al.gmms, RowList):
        return damage  # a layer fitted in this process holds its models as objects
    for g in range(len(al.gmms)):
        try:
            al.clusterer.local_models_[g]
        except IncompatibleModelError as exc:
            damage.local[g] = str(exc)
        try:
            al.gmms[g]
        except IncompatibleModelError as exc:
            damage.online[g] = str(exc)
    return damage


#: The clusterer rows (a layer's global UMAP + GMM: ~18 MB for a 5,000-point fit sample) last
#: read or committed by this process, by the token written beside them. A daemon opens the state
#: for every update, and reading those bytes again cost ~0.17 s CPU an update at 200k leaves.
#: Bytes, not objects: every open unpickles its own clusterer, so an update that changes one and
#: then fails leaves nothing here that the database does not hold (a token names one content).
_HEADS: OrderedDict[str, bytes] = OrderedDict()
_HEADS_KEEP = 8


def _remember(token: str, blob: bytes) -> None:
    _HEADS[token] = blob
    _HEADS.move_to_end(token)
    while len(_HEADS) > _HEADS_KEEP:
        _HEADS.popitem(last=False)


def _gmm_linker(al: AdaptiveLayer) -> Callable[[Any], None]:
    """Return the loader that gives a group's online GMM read from the database its layer's
    cluster id counter (one per layer, shared by its groups; each row pickles a copy)."""

    def relink(gmm: Any) -> None:
        if gmm is not None:
            gmm.ids = al.ids

    return relink


def _parts(i: int) -> list[str]:
    side = side_namespaces(f"L{i}.gmms")
    return [f"L{i}.{p}" for p in ("head", "local", *_LISTS, *_MAPS)] + side


def _track(al: AdaptiveLayer, i: int, clock: Clock) -> None:
    """Replace a layer's containers by tracking ones holding the same data, all marked to write."""
    for name, kind in _MAPS.items():
        rows: RowMap[Any] = RowMap(f"L{i}.{name}", clock)
        tracked: KeyedRowMap[Any, Any] = KeyedRowMap(rows, kind)
        for k, v in dict(getattr(al, name, {})).items():
            tracked[k] = v
        setattr(al, name, tracked)
    for name in _LISTS:
        rows = GroupMap(f"L{i}.{name}", clock)
        items = list(getattr(al, name))
        for j, v in enumerate(items):
            rows[str(j)] = v
        setattr(al, name, RowList(rows, len(items), on_load=_gmm_linker(al)))
    c = al.clusterer
    if isinstance(c.local_models_, RowList) and isinstance(c.local_models_.rows, SpilledModels):
        return  # written to a checkpoint as fitted: the commit copies them from there
    local: RowMap[Any] = ModelRows(f"L{i}.local", clock)
    items = list(c.local_models_)
    for j, v in enumerate(items):
        local[str(j)] = v
    c.local_models_ = RowList(local, len(items), on_load=relink_local)


def _lists(al: AdaptiveLayer) -> list[RowList[Any]]:
    return [al.clusterer.local_models_, *(getattr(al, name) for name in _LISTS)]


def _containers(al: AdaptiveLayer) -> list[RowMap[Any]]:
    return [lst.rows for lst in _lists(al)] + [getattr(al, name).rows for name in _MAPS]


def layer_changes(al: AdaptiveLayer, i: int, ch: Changes, rows: RowStore, clock: Clock) -> None:
    """Add the writes of layer ``i`` to ``ch``: all of it when new or moved, else what changed.

    A layer fitted in this process gets containers of rows made with ``clock``, its state's.
    """
    info = al.storage
    if info is None or info["index"] != i or info["db"] != str(rows.path):
        if not isinstance(al.gmms, RowList):
            _track(al, i, clock)
        ch.clear.update(_parts(i))
        for part in _containers(al):
            part.replace_all()  # loads whatever is still in the database under the old name
            part.ns = f"L{i}.{part.ns.split('.', 1)[1]}"
            if isinstance(part, SpilledModels):
                part.target = rows
        al.storage = {"index": i, "head": True, "db": str(rows.path)}
    persist = al.storage
    for part in _containers(al):
        part.changes(ch)
    write_head = persist["head"] or persist.get("global_version", 0) != al.global_version
    if write_head:  # a new token names the clusterer's new bytes (see open_layer)
        al.clusterer_token = uuid.uuid4().hex
    scalars = {name: getattr(al, name) for name in _scalar_names()}
    ch.set(f"L{i}.head", "scalars", dumps(scalars))
    ch.set(f"L{i}.head", "lengths", dumps([len(al.gmms), len(al.clusterer.local_models_)]))
    if write_head:
        c = al.clusterer
        local, c.local_models_ = c.local_models_, None
        try:
            blob = dumps(c)
        finally:
            c.local_models_ = local
        ch.set(f"L{i}.head", "clusterer", blob)
        persist["written"] = (al.clusterer_token, blob)


def shed_layer(al: AdaptiveLayer, rows: RowStore, *, used_since: int | None = None) -> int:
    """Drop the rows of layer ``al`` held in memory (see ``RowMap.shed``); return how many.

    A layer built in this process and committed to ``rows`` is read from there afterwards.
    """
    persist = al.storage
    if persist is None or persist["db"] != str(rows.path) or not isinstance(al.gmms, RowList):
        return 0  # never committed there: its containers hold the only copy
    dropped = sum(part.shed(rows, used_since=used_since) for part in _lists(al))
    maps: list[RowMap[Any]] = [getattr(al, name).rows for name in _MAPS]
    return dropped + sum(part.shed(rows, used_since=used_since) for part in maps)


def held_by_layer(al: AdaptiveLayer) -> int:
    """Return how many rows of layer ``al`` are held in memory."""
    return sum(part.held() for part in _containers(al)) if isinstance(al.gmms, RowList) else 0


def layer_committed(al: AdaptiveLayer) -> None:
    """Forget a layer's pending writes once they are in the database."""
    for part in _containers(al):
        part.committed()
    local = al.clusterer.local_models_
    if isinstance(local, RowList) and isinstance(local.rows, SpilledModels):
        local.rebind(local.rows.committed_rows())  # read from the state database from now on
    written = al.storage.pop("written", None)
    if written is not None:
        _remember(*written)
    al.storage["head"] = False
    al.storage["global_version"] = al.global_version  # a cut global cluster: written


def remove_layer(i: int, ch: Changes) -> None:
    """Delete every row of layer ``i``."""
    ch.clear.update(_parts(i))


def open_layer(rows: RowStore, i: int, clock: Clock) -> AdaptiveLayer:
    """Open layer ``i`` with its rows stamped by ``clock`` (its state's): its head now,
    everything else on first use."""
    head = rows.get_many(f"L{i}.head", ["scalars", "lengths"])
    scalars: dict[str, Any] = loads(head["scalars"])  # type: ignore[assignment]
    lengths: list[int] = loads(head["lengths"])  # type: ignore[assignment]
    n_groups, n_local = lengths
    token: str | None = scalars.get("clusterer_token")
    blob = _HEADS.get(token) if token else None
    if blob is None:
        blob = rows.get(f"L{i}.head", "clusterer")
        if blob is None:
            raise KeyError(f"layer {i} of {rows.path} has no clusterer row")
    if not token:
        # A layer stored before tokens: name the bytes just read. The token reaches the database
        # with the next commit's scalars (the bytes stay as they are); until then no other
        # process can know it, so it names this content only.
        token = scalars["clusterer_token"] = uuid.uuid4().hex
    _remember(token, blob)
    clusterer: Any
    try:
        clusterer = loads_model(blob, f"the clusterer of layer {i} in {rows.path}")
    except IncompatibleModelError as exc:  # refitted by the next update (model_repair)
        clusterer = UnreadableClusterer(str(exc))
    al = _blank_layer()
    for name in _scalar_names().intersection(scalars):  # a name an older version kept is dropped
        setattr(al, name, scalars[name])
    al.clusterer = clusterer
    for name, kind in _MAPS.items():
        m: RowMap[Any] = RowMap(f"L{i}.{name}", clock)
        m.bind(rows)
        setattr(al, name, KeyedRowMap(m, kind))
    for name in _LISTS:
        m = GroupMap(f"L{i}.{name}", clock)
        m.bind(rows)
        setattr(al, name, RowList(m, n_groups, on_load=_gmm_linker(al)))
    local: RowMap[Any] = ModelRows(f"L{i}.local", clock)
    local.bind(rows)
    clusterer.local_models_ = RowList(local, n_local, on_load=relink_local)
    al.storage = {
        "index": i,
        "head": False,
        "db": str(rows.path),
        "global_version": al.global_version,
    }
    return al
