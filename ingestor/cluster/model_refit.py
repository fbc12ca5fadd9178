"""Fit a layer's models again around the clusters it has: after a library upgrade, a fitted model
that the installed libraries cannot read (a UMAP, a GMM, an online GMM) is refitted from the
layer's node vectors, and the clusters, so their summaries, stay as they are.

What a model is for decides what is fitted:

* the global model routes new nodes to a global cluster ("group"): :func:`refit_global` fits a
  global UMAP on the layer's nodes and one component per group, the M-step of the groups as they
  are (:meth:`~ingestor.cluster.two_step.TreeClusterer.fit_groups`);
* a group's local model places new nodes among the group's clusters: :func:`refit_local` fits a
  local UMAP on the group's members and an online GMM whose components are the M-step of its
  clusters, with their ids and members (:func:`~ingestor.cluster.group_refit.group_fit`).

Neither chooses clusters by BIC, so no membership changes, with one exception: a group with a
local model but too few members left for a UMAP (at most ``n_components + 1``, after removals)
becomes one cluster, as a build guards it (:func:`~ingestor.cluster.group_refit.refit_group`);
the delta then names the clusters that changed. Cost: the build's UMAP fits of the layer, no
BIC search and no summary.
"""

from __future__ import annotations

import logging
from contextlib import closing
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.group_refit import group_fit, refit_group
from ingestor.cluster.layer_state import LayerDelta, Vectors
from ingestor.cluster.two_step import LocalModel

if TYPE_CHECKING:
    from ingestor.cluster.adaptive import AdaptiveLayer
    from ingestor.cluster.online_gmm import OnlineGMM

__all__ = ["reduces", "refit_global", "refit_local", "refit_locals"]

log = logging.getLogger(__name__)

#: A group's member nodes (sorted), their point ids and its clusters (cluster id -> members).
Members = tuple[list[str], list[int], dict[int, frozenset[str]]]


def refit_global(al: AdaptiveLayer, fresh: Any, vectors: Vectors) -> None:
    """Give layer ``al`` a new global model around its groups; its local models are kept.

    Args:
        al: the layer; ``al.point_of`` says each node's group (read whole: O(layer)).
        fresh: an unfitted ``TreeClusterer`` with the layer's parameters (the stored one, which
            held them, cannot be read).
        vectors: the nodes' embeddings (``TreeState.matrix``).
    """
    nodes, labels = [], []
    for node_id, (g, _) in sorted(al.point_of.items()):
        nodes.append(node_id)
        labels.append(g)
    fresh.fit_groups(vectors(nodes), np.asarray(labels, dtype=np.intp), len(al.gmms))
    fresh.local_models_ = al.clusterer.local_models_
    al.clusterer = fresh
    al.global_version += 1  # the head row is written at the next commit


def refit_local(
    al: AdaptiveLayer,
    g: int,
    members: Members,
    vectors: Vectors,
    delta: LayerDelta,
    *,
    old: OnlineGMM | None = None,
    reduced: tuple[Any, NDArray[np.float32]] | None = None,
) -> None:
    """Give group ``g`` of ``al`` a new local model and online GMM holding ``members``' clusters.

    Args:
        members: the group's member nodes (sorted), their point ids and its clusters (cluster
            id → member nodes), as :meth:`~ingestor.cluster.group_upkeep.GroupUpkeep.members_of`
            returns.
        vectors: the nodes' embeddings.
        delta: gets the clusters that changed (only when the group becomes one cluster).
        old: the group's online GMM when it could be read: the sizes its clusters were last
            offered a split at are kept.
        reduced: the group's local UMAP and embedding, fitted already (:func:`refit_locals`);
            None: fitted here, where :func:`reduces` says the group has one.
    """
    nodes, pids, clusters = members
    c = al.clusterer
    if g in al.guarded:  # one cluster and no model to fit: only its record is written again
        cid, held = al.guarded[g]
        al.gmms[g] = None
        c.local_models_[g] = LocalModel(np.arange(len(held)), None, None, None, (cid,))
        return
    if not nodes:  # an emptied group: one (empty) cluster, refilled as a guarded group is
        (cid,) = clusters or {al.ids.take(): frozenset()}
        al.gmms[g] = None
        c.local_models_[g] = LocalModel(np.arange(0), None, None, None, (cid,))
        al.guarded[g] = (cid, set())
        return
    if not reduces(al, g, members):
        # Too few for a UMAP (or a member in no cluster): as a refit of the group would.
        fit = refit_group(
            c,
            nodes,
            vectors(nodes),
            clusters,
            point_ids=pids,
            ids=al.ids,
            tau_n=al.tau_n,
            tau_c=al.tau_c,
        )
    else:
        at = {n: r for r, n in enumerate(nodes)}
        cids = sorted(clusters)
        chosen = np.zeros((len(nodes), len(cids)), dtype=bool)
        for j, cid in enumerate(cids):
            chosen[[at[n] for n in clusters[cid]], j] = True
        umap, Y = reduced if reduced is not None else c.reduce_local(vectors(nodes))
        fit = group_fit(
            np.asarray(Y, dtype=np.float64),
            chosen,
            umap,
            nodes,
            pids,
            cids,
            threshold=c.threshold,
            tau_n=al.tau_n,
            tau_c=al.tau_c,
            ids=al.ids,
            random_state=c.random_state,
        )
        if old is not None and fit.online is not None:
            fit.online.offered = {k: v for k, v in old.offered.items() if k in clusters}
    al.groups.install(g, fit, nodes, pids, placed=True)
    delta.refitted(clusters, fit.clusters, split=False)


def reduces(al: AdaptiveLayer, g: int, members: Members) -> bool:
    """Whether :func:`refit_local` fits group ``g`` a local UMAP: it has a model (not guarded),
    more members than ``n_components + 1`` and every member in one of its clusters (else it
    becomes one cluster, as a refit of the group would make it)."""
    nodes, _, clusters = members
    if g in al.guarded or len(nodes) <= al.clusterer.n_components + 1:
        return False
    held: set[str] = set()
    for m in clusters.values():
        held.update(m)
    return held.issuperset(nodes)


def refit_locals(
    al: AdaptiveLayer,
    members: dict[int, Members],
    vectors: Vectors,
    delta: LayerDelta,
    olds: dict[int, OnlineGMM | None],
) -> None:
    """:func:`refit_local` of each group of ``members`` (in its order; ``olds``: each group's
    online GMM where it could be read), their local UMAPs fitted on the layer clusterer's
    workers (:meth:`~ingestor.cluster.two_step.TreeClusterer.reduce_locals`), a few groups'
    vectors ahead: the same fits as one at a time. 26.5k leaves, 73 groups: 18.4 s one at a
    time, 11.6-12.8 s on 2 workers."""
    wanted = [g for g, m in members.items() if reduces(al, g, m)]
    fits = al.clusterer.reduce_locals(
        (vectors(members[g][0]) for g in wanted),
        count=len(wanted),
        rows=sum(len(members[g][0]) for g in wanted),
    )
    take = set(wanted)
    with closing(fits):  # an error part way stops the workers
        for g, m in members.items():
            reduced = next(fits) if g in take else None
            refit_local(al, g, m, vectors, delta, old=olds.get(g), reduced=reduced)
        next(fits, None)  # run to its end: the workers are shut down, not killed
