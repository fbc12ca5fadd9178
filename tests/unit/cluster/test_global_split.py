"""Bounded global clusters: a group past ``max_group`` points is cut into parts, at build time and
when updates fill it (ingestor.cluster.global_split, GroupUpkeep.split)."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from ingestor.cluster.adaptive import GUARDED, AdaptiveLayer, LayerDelta
from ingestor.cluster.em import fit_gmm
from ingestor.cluster.global_split import bound_groups, split_component
from ingestor.cluster.group_upkeep import GroupUpkeep
from ingestor.cluster.two_step import TreeClusterer
from ingestor.pipeline import load_state
from testkit.fakes import EchoSummarizer
from tests.unit.cluster.test_two_step import sphere_blobs
from tests.unit.tree.test_adrap import check_invariants, doc_text, make_pipeline, write_corpus


def test_a_component_is_cut_into_two_halves_that_new_points_are_routed_to() -> None:
    rng = np.random.default_rng(0)
    left = rng.normal([-3.0, 0.0], 0.5, size=(60, 2))
    right = rng.normal([3.0, 0.0], 0.5, size=(40, 2))
    other = rng.normal([0.0, 8.0], 0.5, size=(30, 2))
    Y = np.vstack([left, right, other])
    gmm = fit_gmm(Y, 2, random_state=0)
    comp = int(gmm.predict(left[:1])[0])
    members = np.flatnonzero(gmm.predict(Y) == comp)
    assert len(members) == 100, "the two lower blobs share one component"
    new, second = split_component(gmm, comp, Y[members], random_state=0)
    assert new.n_components == 3
    assert np.isclose(new.weights_.sum(), 1.0)
    assert 0 < second.sum() < len(members)
    halves = {int(s): set(members[second == s].tolist()) for s in (0, 1)}
    assert {frozenset(h) for h in halves.values()} == {
        frozenset(range(60)),
        frozenset(range(60, 100)),
    }
    # The mixture now routes each half's points (and new points near them) to its own part.
    routed = new.predict(Y[members])
    assert set(routed[~second]) == {comp}
    assert set(routed[second]) == {2}
    left_part, right_part = int(routed[0]), int(routed[-1])
    assert left_part != right_part
    assert new.predict(np.array([[-3.1, 0.1], [2.9, -0.1]])).tolist() == [left_part, right_part]
    assert new.predict(other).tolist() == gmm.predict(other).tolist(), "other parts unchanged"


def test_bound_groups_leaves_no_component_past_the_limit() -> None:
    rng = np.random.default_rng(1)
    Y = rng.normal(size=(500, 3))
    gmm = fit_gmm(Y, 2, random_state=0)
    comp = gmm.predict(Y)
    assert np.bincount(comp).max() > 60
    new, cut = bound_groups(gmm, Y, comp, 60, random_state=0)
    counts = np.bincount(cut)
    assert counts.max() <= 60
    assert new.n_components == len(counts)
    assert (counts > 0).all(), "every part holds points"


def test_a_build_bounds_its_global_clusters() -> None:
    X, _ = sphere_blobs(3, 120, 32, 0.15, seed=2)
    unbounded = TreeClusterer(random_state=0, n_epochs=50, max_group=None).fit(X)
    assert max(len(m.members) for m in unbounded.local_models_) > 80
    bounded = TreeClusterer(random_state=0, n_epochs=50, max_group=80).fit(X)
    sizes = [len(m.members) for m in bounded.local_models_]
    assert max(sizes) <= 80
    assert sum(sizes) == len(X)
    assert len(bounded.global_components_) == len(bounded.local_models_)
    # New points go to a global cluster that exists.
    assert set(bounded.predict_global(X[::7]).tolist()) <= set(range(len(sizes)))


def _vectors(vec: dict[str, NDArray[np.float32]]):  # type: ignore[no-untyped-def]
    return lambda ids: np.stack([vec[i] for i in ids])


def check_groups(al: AdaptiveLayer) -> None:
    """Every node is one point of one group, every cluster lives in one group."""
    c = al.clusterer
    assert len(al.gmms) == len(c.local_models_) == len(c.global_components_)
    owner: dict[int, int] = {}
    for node, (g, p) in al.point_of.items():
        if p == GUARDED:
            assert node in al.guarded[g][1]
        else:
            assert al.node_at[(g, p)] == node
    for g, gmm in enumerate(al.gmms):
        cids = [al.guarded[g][0]] if gmm is None else list(gmm.members)
        for cid in cids:
            assert cid not in owner, f"cluster {cid} in groups {owner[cid]} and {g}"
            owner[cid] = g
            assert al.members(cid), cid
    counts = Counter(g for g, _ in al.point_of.values())
    assert sum(counts.values()) == len(al.point_of)


def grown_group(
    coming: int, room: int
) -> tuple[AdaptiveLayer, int, NDArray[np.float32], list[str], dict[str, NDArray[np.float32]]]:
    """A layer whose largest group may hold ``room`` more points, and ``coming`` new nodes close
    to its members (not placed yet): the layer, the group, their vectors, ids and every vector."""
    X, _ = sphere_blobs(4, 50, 32, 0.1, seed=3)
    ids = [f"a{i}" for i in range(len(X))]
    c = TreeClusterer(random_state=0, n_epochs=50).fit(X)
    al = AdaptiveLayer.from_fit(0, c, ids, {f: [f"s{f}"] for f in range(c.n_clusters_)})
    g = max(range(len(al.gmms)), key=lambda j: len(c.local_models_[j].members))
    c.max_group = len(c.local_models_[g].members) + room
    rng = np.random.default_rng(0)
    rows = [ids.index(n) for n in sorted(n for n, (h, _) in al.point_of.items() if h == g)]
    near = X[rng.choice(rows, coming)] + rng.normal(0, 0.01, size=(coming, X.shape[1]))
    near = (near / np.linalg.norm(near, axis=1, keepdims=True)).astype(np.float32)
    new = [f"b{i}" for i in range(coming)]
    return al, g, near, new, dict(zip(ids, X, strict=True)) | dict(zip(new, near, strict=True))


def add_near(al: AdaptiveLayer, near: NDArray[np.float32], vec: dict[str, Any]) -> None:
    """Later nodes near the cut group land in one of its parts; the layer stays consistent."""
    later = near[:3] + 0.001
    later = (later / np.linalg.norm(later, axis=1, keepdims=True)).astype(np.float32)
    more = [f"c{i}" for i in range(3)]
    vec |= dict(zip(more, later, strict=True))
    al.add_many(more, later, LayerDelta(), vectors=_vectors(vec))
    check_groups(al)


def test_an_update_that_fills_a_group_past_max_group_cuts_it() -> None:
    # 30 new nodes close to the group's members: it ends the batch 20 past max_group.
    al, _, near, new, vec = grown_group(30, 10)
    c = al.clusterer
    groups_before = len(al.gmms)
    delta = LayerDelta()
    al.add_many(new, near, delta, vectors=_vectors(vec))
    assert al.group_splits == 1
    assert len(al.gmms) > groups_before
    assert max(gm.n if gm else len(al.guarded[j][1]) for j, gm in enumerate(al.gmms)) <= c.max_group
    check_groups(al)
    assert delta.created or delta.dirty, "the cut is reported, so summaries follow it"
    add_near(al, near, vec)


def test_a_cut_keeps_the_groups_local_model_and_the_clusters_inside_one_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fitting each part afresh cost ~1 s per 500 points at 265k leaves and changed most of the
    group's clusters (so their summaries); the parts keep the group's model instead. (A group
    due for a refit anyway is refitted part by part: the test above.)"""
    al, g, near, new, vec = grown_group(6, 3)  # too few to make the group due for a refit
    c = al.clusterer
    umap = c.local_models_[g].umap
    seen: dict[int, frozenset[str]] = {}
    cut = LayerDelta()  # what the cut itself reports
    real_split = GroupUpkeep.split

    def split(upkeep: GroupUpkeep, g: int, vectors: Any, delta: LayerDelta) -> list[int]:
        seen.update(upkeep.members_of(g)[2])  # the clusters the cut starts from
        parts = real_split(upkeep, g, vectors, cut)
        delta.absorb(cut.dirty, cut.created, cut.split, cut.removed)
        return parts

    monkeypatch.setattr(GroupUpkeep, "split", split)
    parts_before = len(al.gmms)
    refits = al.refits
    delta = LayerDelta()
    al.add_many(new, near, delta, vectors=_vectors(vec))
    assert al.group_splits == 1
    parts = [g, *range(parts_before, len(al.gmms))]
    assert all(c.local_models_[h].umap is umap for h in parts), "no UMAP was fitted"
    assert al.refits == refits, "no part was fitted"
    check_groups(al)
    now = {cid: frozenset(al.members(cid)) for h in parts for cid in al.gmms[h].members}
    part_of = {n: h for n, (h, _) in al.point_of.items()}
    whole = [cid for cid, m in seen.items() if len({part_of[n] for n in m}) == 1]
    assert whole, "the cut left some clusters inside one part"
    for cid in whole:
        assert now[cid] == seen[cid], f"cluster {cid} inside one part is left as it was"
        assert cid not in cut.dirty | cut.created | cut.removed, "so its summary stays"
    for m in seen.values():  # a crossed cluster is split along the cut, nothing lost
        assert m <= frozenset().union(*(now[k] for k in now if now[k] & m))
    for h in parts:
        gmm = al.gmms[h]
        assert not any(map(gmm.offer_due, gmm.members)), "every cluster was offered its split"
    add_near(al, near, vec)


def test_cut_groups_are_committed_and_read_back(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    rng = random.Random(4)
    write_corpus(root, rng, 16)
    p = make_pipeline(tmp_path, EchoSummarizer())
    p.context.builder.summaries.make_clusterer = lambda: TreeClusterer(
        random_state=0, n_epochs=50, max_group=25
    )
    p.build(root)
    sizes = [len(m.members) for m in p.require_state().layers[0].clusterer.local_models_]
    assert max(sizes) <= 25, "the build bounded its groups"
    # Copies of a file with leaves in the largest group: their chunks embed as the original's, so
    # they land in that group, which the update fills past max_group on any machine's numerics.
    state = p.require_state()
    al = state.layers[0]
    in_group = Counter(g for g, _ in al.point_of.values())
    g, size = in_group.most_common(1)[0]
    of_file = Counter(
        src for n, (h, _) in al.point_of.items() if h == g for src in state.nodes[n].sources
    )
    source, per_copy = of_file.most_common(1)[0]
    text = (root / source).read_text()
    made = [root / f"n{i}.txt" for i in range((26 - size) // per_copy + 2)]
    for f in made:
        f.write_text(text)
    made.append(root / "other.txt")
    made[-1].write_text(doc_text(rng, 8))
    p.update(made)
    check_invariants(p)
    al = p.require_state().layers[0]
    assert al.group_splits >= 1
    # A group promoted from guarded past max_group in one batch is cut in that batch too.
    assert max(Counter(g for g, _ in al.point_of.values()).values()) <= 25
    check_groups(al)
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "models", copy)  # what is on disk, not the live state
    loaded = load_state(type(p.context.models)(copy), "t", readonly=True)
    assert loaded is not None
    l0 = loaded.layers[0]
    assert l0.group_splits == al.group_splits
    assert l0.clusterer.global_gmm_.n_components == al.clusterer.global_gmm_.n_components
    assert l0.clusterer.global_components_.tolist() == al.clusterer.global_components_.tolist()
    check_groups(l0)
    assert {n: l0.point_of[n] for n in al.point_of} == dict(al.point_of.items())


def test_settings_reach_the_clusterer_and_the_online_gmms(tmp_path: Path) -> None:
    """``cluster.max_group`` and ``adrap.tau_n`` (constant by default, so an insert's full-EM
    refit does not grow with the layer as the paper's max(100, sqrt(n)) does)."""
    from ingestor.cli.factories import make_pipeline as from_settings
    from ingestor.config import Settings
    from testkit.fakes import HashEmbedder

    settings = Settings(_env_file=None, state_dir=tmp_path)  # type: ignore[call-arg]
    assert (settings.cluster.max_group, settings.adrap.tau_n) == (1000, 100)
    tuned = settings.model_copy(
        update={
            "cluster": settings.cluster.model_copy(update={"max_group": 0}),
            "adrap": settings.adrap.model_copy(update={"tau_n": 0}),
        }
    )
    for s, max_group, tau_n in ((settings, 1000, 100), (tuned, None, None)):
        p = from_settings(s, store=None, embedder=HashEmbedder(dim=16))  # type: ignore[arg-type]
        assert p.context.builder.summaries.make_clusterer().max_group == max_group
        assert p.context.builder.summaries.params.tau_n == tau_n
