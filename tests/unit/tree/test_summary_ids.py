"""A regenerated summary never takes over the node of a cluster left as it was.

adRAP rewrites a regenerated summary in place, under its old id, so a node's id is not always
the content address of its children. A cluster whose membership comes back to the one that first
made an id must not rewrite the node now holding that id for another cluster (soak seed 1,
batch 14: three leaves were left without a parent)."""

from __future__ import annotations

import pytest

from ingestor.tree.build import BuildStats, Regeneration
from ingestor.tree.state import Node, TreeState, summary_id
from tests.unit.tree.trees import EMBEDDER, make_builder, new_state, real_clusterer


def summary(state: TreeState, node_id: str, children: list[str]) -> None:
    """Put a layer-1 summary ``node_id`` over ``children`` (linked both ways)."""
    text = " ".join(state.nodes[c].text for c in children)
    state.nodes[node_id] = Node(node_id, 1, text, 3, f"h-{node_id}", frozenset(), children=children)
    state.vectors[node_id] = EMBEDDER.embed_documents([text])[0]
    for c in children:
        leaf = state.nodes[c]
        leaf.parents.append(node_id)
        state.nodes[c] = leaf


@pytest.mark.parametrize("own_old_node", [True, False])
def test_a_membership_whose_address_names_another_clusters_node_gets_its_own(
    own_old_node: bool,
) -> None:
    state, (a, b, c, d, e) = new_state(["alpha one", "beta two", "gamma three", "delta four", "e5"])
    taken = summary_id(state.tree, 1, [a, b])  # made for {a, b} once, since rewritten over {c, d}
    summary(state, taken, [c, d])
    old = "old-summary-of-the-regenerated-cluster"
    summary(state, old, [a, b, e])
    regen = Regeneration(reuse={14: [old]} if own_old_node else {})
    made = make_builder(real_clusterer).summaries.summarize_clusters(
        state, 1, {14: [a, b]}, BuildStats(), regen=regen
    )
    (node_id,) = made[14]
    assert node_id != taken, "the regenerated cluster took the node of a cluster left as it was"
    assert state.nodes[taken].children == [c, d]
    assert state.nodes[c].parents == [taken]
    assert state.nodes[d].parents == [taken]
    assert sorted(state.nodes[node_id].children) == sorted([a, b])
    assert node_id in state.nodes[a].parents
    assert node_id in state.nodes[b].parents
    if own_old_node:
        assert node_id == old, "its own previous node is rewritten in place"
    else:
        assert node_id == summary_id(state.tree, 1, [a, b], 1)


def test_a_free_node_at_the_address_is_still_rewritten_in_place() -> None:
    """When every cluster naming the node is regenerated now, the address may take it."""
    state, (a, b, c, d) = new_state(["alpha one", "beta two", "gamma three", "delta four"])
    at = summary_id(state.tree, 1, [a, b])
    summary(state, at, [c, d])
    made = make_builder(real_clusterer).summaries.summarize_clusters(
        state, 1, {14: [a, b], 15: [c]}, BuildStats(), regen=Regeneration(reuse={15: [at]})
    )
    assert made[14] == [at]
    assert sorted(state.nodes[at].children) == sorted([a, b])
