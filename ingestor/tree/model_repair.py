"""After a library upgrade: refit the fitted models that cannot be read, keep the tree.

A layer's fitted models (its global UMAP + GMM, each global cluster's local UMAP + GMM and
online GMM) are pickles of umap-learn, scikit-learn and numpy objects; another release of those
may not read them. Everything else (nodes, summaries, memberships, the summary cache) is rows of
our own, and the node vectors are in the node store, so the models are fitted again from those
vectors around the clusters the layer has (:mod:`ingestor.cluster.model_refit`): no cluster
changes, so no summary is written again.

When the running libraries differ from those the models were written with
(``TreeState.model_libraries``), the first update reads every model of every layer once (a
clusterer that cannot be read is known from the open); afterwards, and when the versions are
the same, this costs nothing. A group's clusters come from its online GMM, or, when that cannot
be read either, from the tree itself: each cluster's members are the children of its summaries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ingestor.cluster.adaptive import AdaptiveLayer, LayerDelta
from ingestor.cluster.model_refit import Members, refit_global, refit_locals
from ingestor.tree.layer_store import ModelDamage, unreadable_models
from ingestor.tree.state import TreeState
from models_store import library_changes, library_versions

__all__ = ["repair_models"]

log = logging.getLogger(__name__)


def repair_models(state: TreeState, make_clusterer: Callable[[], Any]) -> dict[int, LayerDelta]:
    """Refit every fitted model of ``state`` that cannot be read, from the stored vectors.

    Args:
        state: an opened state whose vectors can be read (``state.vectors.fetch`` set).
        make_clusterer: a fresh, unfitted clusterer with the layers' parameters (for a global
            model whose stored clusterer, which held them, cannot be read).

    Returns:
        Per layer, the clusters a refit changed (only a group left too small for a UMAP becomes
        one cluster): the caller regenerates their summaries. Usually empty.
    """
    changed = library_changes(state.model_libraries)
    deltas: dict[int, LayerDelta] = {}
    done: list[str] = []
    why: list[str] = []
    for i, al in enumerate(state.layers):
        damage = unreadable_models(al, scan=bool(changed))
        if not damage:
            continue
        delta = LayerDelta()
        _repair_layer(state, al, damage, make_clusterer, delta)
        if delta.dirty or delta.created or delta.removed:
            deltas[i] = delta
        parts = ["global model"] if damage.head else []
        if damage.groups():
            parts.append(f"{len(damage.groups())} of {len(al.gmms)} local models")
        done.append(f"layer {i}: {' and '.join(parts)}")
        why.extend(damage.reasons()[:1])
    if done:
        log.info(
            "tree %r: refitted %s from the stored vectors, as they could not be read (%s%s); "
            "clusters, summaries and the summary cache kept (%d clusters changed)",
            state.tree,
            "; ".join(done),
            "written with " + ", ".join(changed) + "; " if changed else "",
            why[0][:160],
            sum(len(d.dirty | d.created | d.removed) for d in deltas.values()),
        )
    state.model_libraries = library_versions()
    return deltas


def _repair_layer(
    state: TreeState,
    al: AdaptiveLayer,
    damage: ModelDamage,
    make_clusterer: Callable[[], Any],
    delta: LayerDelta,
) -> None:
    if damage.head:
        refit_global(al, make_clusterer(), state.matrix)
    groups = damage.groups()
    lost = [g for g in groups if g in damage.online and g not in al.guarded]
    from_tree = _members_from_tree(state, al, lost) if lost else {}
    # a lost online GMM: the tree says who is where; else its GMM (or guarded cluster) does
    members = {g: from_tree[g] if g in from_tree else al.groups.members_of(g) for g in groups}
    olds = {g: al.gmms[g] for g in groups if g not in from_tree and g not in al.guarded}
    refit_locals(al, members, state.matrix, delta, olds)


def _members_from_tree(
    state: TreeState, al: AdaptiveLayer, groups: list[int]
) -> dict[int, Members]:
    """The members and clusters of ``groups``, read from the tree: each node's group and point
    from ``point_of``, each cluster's members from its summaries' children (O(layer))."""
    wanted = set(groups)
    pid_of: dict[int, dict[str, int]] = {g: {} for g in groups}
    for node_id, (g, pid) in al.point_of.items():
        if g in wanted:
            pid_of[g][node_id] = pid
    group_of = {n: g for g, pids in pid_of.items() for n in pids}
    clusters: dict[int, dict[int, frozenset[str]]] = {g: {} for g in groups}
    for cid, summaries in al.cluster_nodes.items():
        kids = {
            child
            for s in summaries
            if (node := state.nodes.peek(s)) is not None
            for child in node.children
            if child in group_of
        }
        if kids:
            clusters[group_of[next(iter(kids))]][cid] = frozenset(kids)
    out: dict[int, Members] = {}
    for g in groups:
        nodes = sorted(pid_of[g])
        out[g] = (nodes, [pid_of[g][n] for n in nodes], clusters[g])
    return out
