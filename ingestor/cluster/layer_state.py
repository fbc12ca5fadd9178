"""What a clustered tree layer holds, and what a batch of updates did to it.

:class:`LayerState` is the state of an :class:`~ingestor.cluster.adaptive.AdaptiveLayer`: its
fitted clusterer, one online GMM per global cluster ("group"), where each node sits and which
summary nodes each cluster maps to. The layer places nodes
(:class:`~ingestor.cluster.adaptive.AdaptiveLayer`) and keeps its groups fit
(:class:`~ingestor.cluster.group_upkeep.GroupUpkeep`) over these fields, and the tree's store
writes them by name, each part in rows of its own.

:class:`LayerDelta` is what one batch of operations did to a layer's clusters; :func:`prefetch`
and :func:`edit` read a stored layer's containers (a plain dict or list, a layer fitted in this
process, needs neither).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.online_gmm import IdCounter, OnlineGMM

__all__ = ["GUARDED", "REFIT_SHARE", "LayerDelta", "LayerState", "Vectors", "edit", "prefetch"]

#: Point id of a node in a global cluster too small for a local UMAP + GMM ("guarded").
GUARDED = -1

#: A group is refitted once more than ``max(tau_c, REFIT_SHARE x`` its fitted size) of its points
#: changed (``ADRAP_ADRAP__REFIT_SHARE``). It was 0.5 until 2026-12-02: a 5,000-operation soak
#: then ended with layer-1 clusters placed online over up to half of each group, ARI 0.27-0.32
#: against a rebuild of the final folder (0.34-0.48 at 0.25; two rebuilds 0.49-0.52), for 4-7 %
#: more summary tokens and ~20 % more mean CPU a one-document change; docs/operations.md, Drift.
REFIT_SHARE = 0.25

#: ``vectors(node_ids)``: the (n, d) matrix of the nodes' embeddings (``TreeState.matrix``).
Vectors = Callable[[list[str]], NDArray[np.float32]]


@dataclass
class LayerState:
    """What an adaptive layer holds: the online clustering of layer ``layer``'s nodes into the
    summaries of layer ``layer + 1``.

    Attributes:
        clusterer: the fitted ``TreeClusterer`` (global UMAP + GMM, local UMAPs).
        gmms: per global cluster, its online local GMM (None: a guarded, single-cluster group).
        guarded: per guarded global cluster, its one cluster id and member node ids.
        point_of: node id → (global cluster, point id in its OnlineGMM or GUARDED).
        node_at: (global cluster, point id) → node id.
        cluster_nodes: cluster id → summary node ids of the layer above.
        greedy: the paper's greedy baseline: join the most probable cluster, no GMM update.
        tau_n, tau_c: Algorithm 2's thresholds, for the online GMMs of promoted groups.
        ids: the layer's cluster id counter (shared by its OnlineGMMs).
        placed: summary layers only: node id → digest of the vector its point was placed from.
        refits: how many local models were fitted after the build (a group refitted or
            promoted); the clusterer's ``local_models_`` changed each time.
        refit_share: a group is refitted once more than ``max(tau_c, refit_share x n_fitted)``
            of its points changed (:data:`REFIT_SHARE`; ``inf`` keeps the build's local models,
            as the paper); an update sets it from the running settings.
        group_splits: how many global clusters were cut for their size after the build.
        global_version: bumped when the global model changed (a cut group): the store writes it.
        cluster_group: cluster id → its global group, kept as clusters appear (see
            :meth:`~ingestor.cluster.group_upkeep.GroupUpkeep.index`); ``cluster_index_built``
            once it was filled from the groups.
        clusterer_token: names the stored bytes of the clusterer (set by the tree's store).
        storage: the tree's store's bookkeeping for this layer (opaque here; not persisted).
    """

    layer: int
    clusterer: Any
    gmms: list[OnlineGMM | None]
    guarded: dict[int, tuple[int, set[str]]]
    point_of: dict[str, tuple[int, int]]
    node_at: dict[tuple[int, int], str]
    cluster_nodes: dict[int, list[str]]
    greedy: bool = False
    tau_n: int = 100
    tau_c: int = 11
    ids: IdCounter = field(default_factory=IdCounter)
    placed: dict[str, tuple[float, ...]] = field(default_factory=dict)
    refits: int = 0
    refit_share: float = REFIT_SHARE
    group_splits: int = 0
    global_version: int = 0
    cluster_group: MutableMapping[int, int] = field(default_factory=dict)
    cluster_index_built: bool = False
    clusterer_token: str | None = None
    storage: Any = field(default=None, repr=False, compare=False)


@dataclass
class LayerDelta:
    """One batch of operations on one layer: the cluster ids it touched, and what its removals
    leave for its placements (``AdaptiveLayer.remove`` then ``add_many`` with the same delta).

    Attributes:
        dirty, created, split, removed: the clusters whose summary must be regenerated, that
            appeared, that were split, that are gone.
        touched: global groups that lost a point (``add_many`` checks whether they need a refit).
        moving: node → (its group, its clusters) for nodes removed to be placed again (a
            rewritten summary): one changed point of their group, not two.
    """

    dirty: set[int] = field(default_factory=set)
    created: set[int] = field(default_factory=set)
    split: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)
    touched: set[int] = field(default_factory=set)
    moving: dict[str, tuple[int, frozenset[int]]] = field(default_factory=dict)

    def take_removals(self) -> tuple[set[int], dict[str, tuple[int, frozenset[int]]]]:
        """Return what this batch's removals left for its placements (``touched``, ``moving``)
        and clear it: a delta reused for another batch starts afresh."""
        taken = self.touched, self.moving
        self.touched, self.moving = set(), {}
        return taken

    def absorb(
        self,
        dirty: Iterable[int],
        created: Iterable[int],
        split: Iterable[int],
        removed: Iterable[int],
    ) -> None:
        """Merge one operation's result into the batch's delta, in operation order."""
        dirty, created, removed = set(dirty), set(created), set(removed)
        # A cluster emptied earlier in the batch and populated again (a guarded group keeps its
        # id) exists at the end: it must be regenerated, not removed.
        revived = (dirty | created) & self.removed
        self.removed -= revived
        self.dirty |= revived
        self.created |= created - revived
        self.removed |= removed
        self.created -= self.removed
        self.dirty |= dirty
        self.dirty -= self.removed
        self.split |= set(split)

    def refitted(
        self,
        old: dict[int, frozenset[str]],
        new: dict[int, frozenset[str]],
        *,
        split: bool,
    ) -> None:
        """Merge what a refit of a group did: its clusters (id → member nodes) were ``old``, are
        ``new``. ``split``: the old clusters count as split when new ones appeared."""
        created = new.keys() - old.keys()
        changed = [c for c in new.keys() & old.keys() if new[c] != old[c]]
        self.absorb(changed, created, list(old) if split and created else [], old.keys() - new)


def prefetch(mapping: object, keys: Iterable[Any]) -> None:
    """Ask a lazily stored mapping to read ``keys`` in one query (a plain dict needs nothing)."""
    fetch = getattr(mapping, "prefetch", None)
    if fetch is not None:
        fetch(keys)


K = TypeVar("K")
V = TypeVar("V")


@overload
def edit(container: Sequence[V], key: int) -> V: ...
@overload
def edit(container: Mapping[K, V], key: K) -> V: ...
def edit(container: Any, key: Any) -> Any:
    """Return ``container[key]`` to change in place: a stored layer's container (a tree's rows,
    with an ``edit`` of its own) then writes it at the next commit; a plain dict or list, a
    layer fitted in this process, needs nothing. A value read with ``[]`` and changed is not
    written."""
    take = getattr(container, "edit", None)
    return take(key) if take is not None else container[key]
