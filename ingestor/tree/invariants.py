"""The tree's invariants, checked after every update in tests and soaks.

They are listed in docs/architecture.md (Invariants). :func:`violations` reads the state through
its public mappings only (``nodes``, ``sources``, ``layers`` and ``matrix``), iterating them, so it
works whether they are dicts or lazy views. It costs a pass over the whole tree: a check for tests
and benchmarks, not for the update path.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from ingestor.cluster.adaptive import GUARDED, same_digest, vector_digest
from ingestor.cluster.group_upkeep import OUTGROWN, outgrown_limit
from ingestor.cluster.online_gmm import REOFFER_GROWTH
from ingestor.tree.state import Provenance, folders_of


def violations(
    state: Any, *, min_top_nodes: int = 10, max_layers: int = 5, placement: bool = True
) -> list[str]:
    """Return every broken invariant of a tree state (empty when the tree is sound).

    Args:
        state: a ``TreeState``.
        min_top_nodes: Algorithm 1 stops when the top layer has at most this many nodes.
        max_layers: ... or when the tree has this many layers.
        placement: check that each summary's point was placed from its own vector (reads the
            vectors of every summary).
    """
    bad: list[str] = []
    # A state opened without its node store (read-only) cannot read vectors: skip placement.
    placement = placement and not (_lazy(state) and state.vectors.fetch is None)
    nodes = state.nodes
    by_layer: dict[int, set[str]] = defaultdict(set)
    for nid, node in nodes.items():
        by_layer[node.layer].add(nid)
    bad += _links(state, len(by_layer.get(0, ())), min_top_nodes)
    entries = state.sources.values()
    indexed = {i for entry in entries for i in entry.node_ids}
    for entry in entries:  # a leaf is readable by its file's readers (summaries: _links)
        if not entry.access:
            continue
        for i in entry.node_ids:
            leaf = _peek(nodes, i)
            if leaf is not None and leaf.access != frozenset({entry.access}):
                bad.append(f"leaf {i} has classes {sorted(leaf.access)}, its file {entry.access}")
                break
    if indexed != by_layer.get(0, set()):
        bad.append(f"source index lists {len(indexed)} leaves, tree has {len(by_layer[0])}")
    for i, al in enumerate(state.layers):
        bad += _layer(state, i, al, by_layer, placement)
    stale = {nid for nid, node in nodes.items() if node.stale}
    registered = set(getattr(state, "stale", None) or ())
    if stale != registered:
        bad.append(
            f"stale summaries {sorted(stale - registered)[:3]} unregistered, "
            f"registered {sorted(registered - stale)[:3]} not stale (tree.deferral)"
        )
    if by_layer.get(0, set()) & stale:
        bad.append("a leaf is marked stale: only summaries are regenerated")
    depth = len(state.layers) + 1
    if nodes and sorted(by_layer) != list(range(depth)):
        bad.append(f"node layers {sorted(by_layer)} but {len(state.layers)} clustered layers")
    top = len(by_layer.get(depth - 1, ()))
    if top > min_top_nodes and depth < max_layers:
        bad.append(f"top layer has {top} nodes (> {min_top_nodes}) and the tree {depth} layers")
    if state.layers and len(state.layers[-1]) <= min_top_nodes:
        bad.append(
            f"top layer {depth - 1} sits over {len(state.layers[-1])} nodes "
            f"(<= {min_top_nodes}): a build would have stopped under it"
        )
    return bad


def _lazy(state: Any) -> bool:
    """Return whether the state was opened from its database (vectors live in the node store)."""
    return getattr(state, "rows", None) is not None


def _peek(mapping: Any, key: str) -> Any:
    """Read without marking the value for write-back (lazy state mappings), else ``get``."""
    return mapping.peek(key) if hasattr(mapping, "peek") else mapping.get(key)


def _links(state: Any, n_leaves: int, min_top_nodes: int) -> list[str]:
    """Parent/child links both ways, sources, vectors, leaves with parents."""
    bad: list[str] = []
    nodes = state.nodes
    limit = int(getattr(state, "max_node_sources", 0))
    for nid, node in nodes.items():
        for c in node.children:
            child = _peek(nodes, c)
            if child is None:
                bad.append(f"{nid}: child {c} missing")
            elif nid not in child.parents:
                bad.append(f"{nid}: child {c} does not list it as parent")
        for p in node.parents:
            parent = _peek(nodes, p)
            if parent is None:
                bad.append(f"{nid}: parent {p} missing")
            elif nid not in parent.children:
                bad.append(f"{nid}: parent {p} does not list it as child")
        if node.layer > 0:
            if not node.children:
                bad.append(f"{nid}: summary without children")
            kids = [k for k in (_peek(nodes, c) for c in node.children) if k is not None]
            merged, held = Provenance.merge(kids, limit), Provenance.of(node)
            if node.stale:  # its text may hold files gone since: their classes stay too
                if not merged.access <= held.access:
                    bad.append(f"{nid}: a stale summary lacks a class of its children's")
                merged, held = (
                    replace(merged, access=frozenset()),
                    replace(held, access=frozenset()),
                )
            if merged != held:
                bad.append(
                    f"{nid}: sources differ from the union of its children's (capped past {limit})"
                )
        else:
            if node.sources != {node.source} or node.dirs != folders_of(node.sources):
                bad.append(f"{nid}: a leaf of {node.source!r} lists sources {sorted(node.sources)}")
            if n_leaves > min_top_nodes and not node.parents:
                bad.append(f"{nid}: leaf without parent in a tree of {n_leaves} leaves")
    vectors = getattr(state, "vectors", None)
    if vectors is not None and not _lazy(state):  # a stored state reads vectors from the store
        bad += [f"{nid}: no vector" for nid in nodes if nid not in vectors]
    return bad


def _layer(
    state: Any, i: int, al: Any, by_layer: dict[int, set[str]], placement: bool
) -> list[str]:
    """One clustered layer: node <-> point one to one, clusters <-> summaries, split offers."""
    bad: list[str] = []
    ids = by_layer.get(i, set())
    if set(al.point_of) != ids:
        bad.append(f"layer {i}: {len(al.point_of)} points for {len(ids)} nodes")
    for (g, pid), node_id in al.node_at.items():
        if al.point_of.get(node_id) != (g, pid):
            bad.append(f"layer {i}: point {(g, pid)} names {node_id}, which sits elsewhere")
    clusters: dict[int, int] = {}  # cluster id -> size
    for g, gmm in enumerate(al.gmms):
        if gmm is None:
            cid, members = al.guarded[g]
            if members:  # an emptied guarded group stays, without a cluster, until refilled
                clusters[cid] = len(members)
            if len(members) > al.tau_c and not al.greedy:
                bad.append(f"layer {i}: guarded group {g} has {len(members)} > tau_c members")
            if any(al.point_of.get(m) != (g, GUARDED) for m in members):
                bad.append(f"layer {i}: guarded group {g} lists nodes placed elsewhere")
            continue
        if set(gmm.point_ids) != {pid for (gg, pid) in al.node_at if gg == g}:
            bad.append(f"layer {i} group {g}: GMM points and nodes differ")
        if al.groups.oversized(gmm.n) and not al.greedy:
            bad.append(
                f"layer {i}: group {g} holds {gmm.n} points, past max_group, and was not cut"
            )
        for cid, pids in gmm.members.items():
            clusters[cid] = len(pids)
            if gmm.offer_due(cid) and not al.greedy:
                bad.append(
                    f"layer {i}: cluster {cid} has {len(pids)} > tau_c members and was not "
                    f"offered its split since it was 1/(1 + {REOFFER_GROWTH:g}) of that size "
                    f"(offered at {gmm.offered.get(cid)})"
                )
            if len(pids) > outgrown_limit(gmm) and not al.greedy:
                bad.append(
                    f"layer {i}: cluster {cid} has {len(pids)} members, more than {OUTGROWN:g}x "
                    f"the largest cluster its group's fit made ({gmm.fitted_largest}), and the "
                    "group was not refitted"
                )
    guarded = {al.guarded[g][0] for g, gmm in enumerate(al.gmms) if gmm is None}
    stale = set(al.cluster_group) - set(clusters) - guarded
    if stale:
        bad.append(f"layer {i}: the cluster -> group index keeps gone clusters {sorted(stale)[:5]}")
    if set(al.cluster_nodes) != set(clusters):
        bad.append(
            f"layer {i}: summaries for clusters {sorted(set(al.cluster_nodes) ^ set(clusters))[:5]}"
        )
    above = by_layer.get(i + 1, set())
    named = {n for ns in al.cluster_nodes.values() for n in ns}
    if named != above:
        bad.append(
            f"layer {i}: clusters name {len(named)} summaries, layer {i + 1} has {len(above)}"
        )
    for node_id in ids & set(al.point_of):
        want = {
            p
            for cid in al.clusters_of(node_id)
            for p in al.cluster_nodes.get(cid, ())
            if (parent := _peek(state.nodes, p)) is not None and node_id in parent.children
        }
        if want != set(_peek(state.nodes, node_id).parents):
            bad.append(f"layer {i}: {node_id}'s parents differ from its clusters' summaries")
    if placement and i > 0:
        placed = sorted(ids & set(al.point_of))
        for node_id, vec in zip(placed, state.matrix(placed), strict=True):
            if not same_digest(al.placed.get(node_id), vector_digest(vec)):
                bad.append(f"layer {i}: {node_id}'s point was not placed from its own vector")
    return bad
