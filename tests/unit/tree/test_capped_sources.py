"""A summary over more files (folders) than the tree's ``max_node_sources`` lists none, exactly:
the lists of the others stay the union of their children's through adds, edits, removes and
renames, a node falls back under the limit when documents leave it, and an update writes lists
bounded by the limit however many documents the tree holds."""

from __future__ import annotations

import dataclasses
import pickle
import random
from pathlib import Path

from ingestor.pipeline import Pipeline
from ingestor.tree.state import Node, Provenance, TreeState, folders_of
from retriever import SearchFilter
from testkit.fakes import EchoSummarizer, HashEmbedder
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline

LIMIT = 4


def leaf(source: str) -> Node:
    return Node(source, 0, "t", 1, "h", frozenset({source}), source=source)


def summary(children: list[Node], limit: int) -> Node:
    prov = Provenance.merge(children, limit)
    return Node(
        "s", 1, "t", 1, "h", prov.sources, sources_capped=prov.sources_capped,
        dirs=prov.dirs, dirs_capped=prov.dirs_capped,
    )  # fmt: skip


def test_merge_is_the_union_up_to_the_limit_and_capped_past_it() -> None:
    kids = [leaf("a/x.txt"), leaf("a/y.txt"), leaf("a/b/z.txt")]
    p = Provenance.merge(kids, 3)
    assert p.sources == {"a/x.txt", "a/y.txt", "a/b/z.txt"}
    assert not p.sources_capped
    assert p.dirs == {"a/", "a/b/"}
    assert not p.dirs_capped
    p = Provenance.merge(kids, 2)
    assert (p.sources, p.sources_capped) == (frozenset(), True)
    assert (p.dirs, p.dirs_capped) == (
        frozenset({"a/", "a/b/"}),
        False,
    )  # two folders: within the limit
    # A capped child caps its parent (it has more than the limit under it), even with one child.
    assert Provenance.merge([summary(kids, 2)], 2).sources_capped
    assert not Provenance.merge([summary(kids, 2)], 2).dirs_capped
    # 0: no limit, the exact union however large.
    many = [leaf(f"d{i}/f.txt") for i in range(500)]
    p = Provenance.merge(many, 0)
    assert len(p.sources) == 500
    assert len(p.dirs) == 500
    assert not p.sources_capped


def test_a_node_stored_before_the_limit_reads_back_with_its_folders() -> None:
    node = leaf("r/2024/q1.md")
    for key in ("dirs", "sources_capped", "dirs_capped"):
        del node.__dict__[key]
    back = pickle.loads(pickle.dumps(node))
    assert back.dirs == folders_of(back.sources) == {"r/", "r/2024/"}
    assert back.sources_capped is False
    assert back.dirs_capped is False
    # A state built before the limit keeps listing every source until it is rebuilt.
    assert TreeState(tree="t", root="/r", embed_model="m", dim=2).max_node_sources == 0


def capped_pipeline(tmp: Path) -> Pipeline:
    p = make_pipeline(tmp, EchoSummarizer())
    # min_top_nodes 2: a deep tree, where ancestors above same-text summaries are refreshed.
    p.context.builder.summaries.params = dataclasses.replace(
        p.context.builder.summaries.params, max_node_sources=LIMIT, min_top_nodes=2
    )
    return p


def write(path: Path, rng: random.Random) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc_text(rng, rng.randint(3, 7)))


def test_lists_stay_exact_and_bounded_through_updates(tmp_path: Path) -> None:
    rng = random.Random(11)
    root = tmp_path / "docs"
    for i in range(24):
        write(root / ("a" if i % 3 else "b") / f"d{i}.txt", rng)
    p = capped_pipeline(tmp_path)
    try:
        p.build(root)
        state = p.require_state()
        assert state.max_node_sources == LIMIT
        # Every list is the capped union of its children's, in the store too.
        check_invariants(p, min_top_nodes=2)
        summaries = [n for n in state.nodes.values() if n.layer > 0]
        assert any(n.sources_capped for n in summaries), "the top summaries are capped"
        assert any(n.sources and not n.sources_capped for n in summaries)
        unchanged = 0
        for step in range(10):
            files = sorted(root.rglob("*.txt"))
            op = step % 4
            if op == 0:  # add two documents
                made = [root / "a" / f"n{step}_{k}.txt" for k in range(2)]
                for f in made:
                    write(f, rng)
                report = p.update(made)
            elif op == 1:  # remove three
                gone = rng.sample(files, 3)
                for f in gone:
                    f.unlink()
                report = p.update(gone)
            elif op == 2:  # rename across folders
                src = rng.choice(files)
                dst = root / "c" / f"moved{step}.txt"
                dst.parent.mkdir(exist_ok=True)
                src.rename(dst)
                report = p.update([src, dst])
            else:  # edit
                f = rng.choice(files)
                f.write_text(f.read_text() + " " + doc_text(rng, 2))
                report = p.update([f])
            check_invariants(p, min_top_nodes=2)
            state = p.require_state()
            written = state.payloads(sorted(report.stats.upserted - report.stats.deleted))
            assert all(len(w.sources) <= LIMIT and len(w.source_dirs) <= LIMIT for w in written)
            unchanged += report.stats.summaries_unchanged
        assert unchanged, "some ancestors were refreshed above same-text summaries"
        # Shrink the collection under the limit: every summary lists its files again.
        files = sorted(root.rglob("*.txt"))
        for f in files[LIMIT:]:
            f.unlink()
        p.update(files[LIMIT:])
        check_invariants(p, min_top_nodes=2)
        state = p.require_state()
        assert not any(n.sources_capped for n in state.nodes.values())
    finally:
        p.context.store.close()


def test_file_and_folder_filters_skip_capped_summaries_only(tmp_path: Path) -> None:
    rng = random.Random(5)
    root = tmp_path / "docs"
    for i in range(20):
        write(root / "only" / f"d{i}.txt", rng)
    p = capped_pipeline(tmp_path)
    try:
        p.build(root)
        state = p.require_state()
        capped = [n for n in state.nodes.values() if n.sources_capped]
        assert capped
        assert all(n.dirs == frozenset({"only/"}) and not n.dirs_capped for n in capped)
        q = HashEmbedder(dim=48).embed_query(capped[0].text)
        n_all = len(state.nodes)
        by_folder = p.context.store.search(q, SearchFilter("t", source_prefix="only/"), n_all)
        assert {h.node.node_id for h in by_folder} == set(state.nodes), "capped ones too"
        one = "only/d3.txt"
        by_file = p.context.store.search(q, SearchFilter("t", source_prefix=one), 500)
        assert by_file, "the file's leaves and its uncapped ancestors match"
        for h in by_file:
            assert one in h.node.sources
            assert not h.node.sources_capped
        expect = {i for i, n in state.nodes.items() if one in n.sources}
        assert {h.node.node_id for h in by_file} == expect
    finally:
        p.context.store.close()


def test_a_capped_summary_says_so_in_query_output() -> None:
    from ingestor.cli.query import _where
    from retriever import ScoredNode

    node = summary([leaf(f"a/{i}.txt") for i in range(6)], LIMIT)
    hit = ScoredNode(node.payload("t", "m"), 0.5).to_json()
    assert hit["sources_capped"] is True
    assert hit["sources"] == []
    assert "max_node_sources" in _where(hit)
    small = ScoredNode(summary([leaf("a/1.txt"), leaf("b/2.txt")], LIMIT).payload("t", "m"), 0.5)
    assert _where(small.to_json()) == "a/1.txt, b/2.txt"
