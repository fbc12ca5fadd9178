"""A summary regenerated with the same text stays where it is above, and its ancestors' sources
still follow the documents under it (TreeUpdater.refresh_provenance)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np

from testkit.fakes import EchoSummarizer
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline, write_corpus


def ancestors(state, node_id: str) -> set[str]:  # type: ignore[no-untyped-def]
    out: set[str] = set()
    todo = [node_id]
    while todo:
        for p in state.nodes[todo.pop()].parents:
            if p not in out:
                out.add(p)
                todo.append(p)
    return out


def test_unchanged_summaries_do_not_ripple_and_sources_still_follow(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    rng = random.Random(7)
    write_corpus(root, rng, 30)
    # EchoSummarizer keeps the first words of the first children: its text often comes out the same.
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.context.builder.summaries.params = dataclasses.replace(
        p.context.builder.summaries.params, min_top_nodes=2
    )  # 4 layers
    p.build(root)
    assert len(p.require_state().layer_counts()) == 4
    unchanged = 0
    for step in range(8):
        made = [root / f"new{step}_{i}.txt" for i in range(2)]
        for f in made:
            f.write_text(doc_text(rng, rng.randint(5, 9)))
        report = p.update(made)
        unchanged += report.stats.summaries_unchanged
        check_invariants(p, min_top_nodes=2)  # sources == union of children's, links, store
        state = p.require_state()
        for f in made:
            rel = f.relative_to(root).as_posix()
            for leaf in state.sources[rel].node_ids:
                for a in ancestors(state, leaf):
                    assert rel in state.nodes[a].sources, (rel, a)
    assert unchanged > 0, "some regenerated summaries came out the same"


def test_sources_are_brought_up_to_date_above_a_refreshed_summary(tmp_path: Path) -> None:
    """The refresh itself, on a node whose parents are not regenerated (a deep tree makes this
    common; a small one regenerates its few top nodes anyway)."""
    from ingestor.tree.adrap import TreeUpdater, UpdateStats

    root = tmp_path / "docs"
    write_corpus(root, random.Random(3), 30)
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.build(root)
    state = p.require_state()
    node = next(n for n in state.nodes.values() if n.layer == 1 and n.parents)
    node.sources = node.sources | {"new/doc.txt"}
    state.nodes[node.node_id] = node
    above = ancestors(state, node.node_id)
    assert above
    stats = UpdateStats()
    TreeUpdater.refresh_provenance(state, {node.node_id}, stats)
    assert stats.upserted == above
    for a in above:
        assert "new/doc.txt" in state.nodes[a].sources
    assert all(
        "new/doc.txt" not in n.sources
        for n in state.nodes.values()
        if n.node_id not in above | {node.node_id}
    )


def test_a_summary_whose_members_changed_but_not_its_text_keeps_its_vector(tmp_path: Path) -> None:
    """Members came or went, the text came out the same: the summary is not embedded again and
    keeps its vector, hence its place in the layer above (whose clusters see only vectors), and
    the update embeds only the summaries whose text is new."""
    root = tmp_path / "docs"
    rng = random.Random(11)
    write_corpus(root, rng, 30)
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.build(root)
    embedded: list[str] = []
    embed_documents = p.context.builder.summaries.embedder.embed_documents

    def recording(texts):  # type: ignore[no-untyped-def]
        embedded.extend(texts)
        return embed_documents(texts)

    p.context.builder.summaries.embedder.embed_documents = recording  # type: ignore[method-assign]
    kept = 0
    for step in range(6):
        state = p.require_state()
        before = {
            n.node_id: (sorted(n.children), n.content_hash, state.vectors[n.node_id].copy())
            for n in state.nodes.values()
            if n.layer >= 1
        }
        made = [root / f"new{step}_{i}.txt" for i in range(2)]
        for f in made:
            f.write_text(doc_text(rng, rng.randint(5, 9)))
        embedded.clear()
        p.update(made)
        check_invariants(p)
        state = p.require_state()
        new_text = 0
        for node in state.nodes.values():
            if node.layer == 0:
                continue
            old = before.get(node.node_id)
            if old is None or old[1] != node.content_hash:
                new_text += 1
            elif old[0] != sorted(node.children):
                kept += 1
                np.testing.assert_array_equal(state.vectors[node.node_id], old[2])
        leaves = sum(len(state.sources[f.relative_to(root).as_posix()].node_ids) for f in made)
        assert len(embedded) - leaves == new_text, "only summaries with new text are embedded"
    assert kept > 0, "some summaries changed members and kept their text"
