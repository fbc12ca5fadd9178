"""Stored trees name the online GMM's classes in their pickles: every name they ever used still
loads, and what is pickled now names the package, not the file inside it that defines a class.

``pickles/`` holds pickles written (protocol 5, as the tree's store writes rows) by the code of
commit 1f1245f, before the online GMM became a package and a layer's upkeep a collaborator:

* ``online_gmm.pickle``: an OnlineGMM pickled whole (a group's row before groups were stored by
  parts): ``ingestor.cluster.online_gmm.OnlineGMM``, ``ingestor.cluster.points.PointBuffer`` and
  ``IdCounter``, ``ingestor.cluster.gmm.GaussianParams``;
* ``adaptive_layer.pickle``: an AdaptiveLayer pickled whole (adrap 0.1's states hold them) with
  that OnlineGMM in group 0 and a guarded group 1, its clusterer None.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from ingestor.cluster.adaptive import GUARDED, AdaptiveLayer, LayerDelta
from ingestor.cluster.em import fit_gmm
from ingestor.cluster.online_gmm import IdCounter, OnlineGMM, PointBuffer

PICKLES = Path(__file__).parent / "pickles"

#: Group 0's clusters in the pickles: 20 points in two blobs, point 3 removed, point 20 added.
CLUSTERS = {0: set(range(10, 20)), 1: {0, 1, 2, 4, 5, 6, 7, 8, 9, 20}}

#: (module, class) names stored trees gave the online GMM's classes, oldest first.
OLD_NAMES = [
    ("ingestor.cluster.online_gmm", "OnlineGMM"),
    ("ingestor.cluster.online_gmm", "PointBuffer"),
    ("ingestor.cluster.online_gmm", "IdCounter"),
    ("ingestor.cluster.incremental", "PointBuffer"),
    ("ingestor.cluster.incremental", "IdCounter"),
    ("ingestor.cluster.points", "PointBuffer"),
    ("ingestor.cluster.points", "IdCounter"),
]


def small_gmm() -> OnlineGMM:
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 0.3, (10, 2)), rng.normal(4, 0.3, (10, 2))])
    return OnlineGMM.from_gmm(fit_gmm(X, 2, random_state=0), X, tau_n=5)


def test_an_online_gmm_pickled_whole_before_the_package_loads_and_updates() -> None:
    gmm = pickle.loads((PICKLES / "online_gmm.pickle").read_bytes())
    assert isinstance(gmm, OnlineGMM)
    assert isinstance(gmm.buffer, PointBuffer)
    assert isinstance(gmm.ids, IdCounter)
    assert gmm.members == CLUSTERS
    assert (gmm.n, gmm.cluster_ids, gmm.churn) == (20, [0, 1], 2)
    result = gmm.add(np.array([4.1, 3.9]))  # n > tau_n: the incremental branch
    assert result.assigned == {0}
    gmm.remove(0)
    assert gmm.n == 20


def test_a_layer_pickled_whole_before_its_upkeep_was_a_collaborator_loads() -> None:
    al = pickle.loads((PICKLES / "adaptive_layer.pickle").read_bytes())
    assert isinstance(al, AdaptiveLayer)
    gmm = al.gmms[0]
    assert isinstance(gmm, OnlineGMM)
    assert gmm.ids is al.ids, "one id counter per layer"
    assert (al.refits, al.group_splits, al.global_version, al.ids.next_id) == (2, 1, 3, 3)
    assert al.guarded == {1: (2, {"g0", "g1"})}
    assert al.groups.index() == {0: 0, 1: 0, 2: 1}
    assert al.members(2) == ["g0", "g1"]
    assert al.members(0) == sorted(f"n{p}" for p in CLUSTERS[0])
    nodes, pids, clusters = al.groups.members_of(0)
    assert nodes == sorted(f"n{p}" for p in gmm.point_ids)
    assert sorted(pids) == sorted(gmm.point_ids)
    assert clusters == {cid: frozenset(f"n{p}" for p in m) for cid, m in CLUSTERS.items()}
    delta = LayerDelta()
    al.remove("g0", delta)
    al.remove("n20", delta)
    assert al.point_of.get("g1") == (1, GUARDED)
    assert delta.dirty == {1, 2}
    data = pickle.dumps(al)
    assert b"group_upkeep" not in data, "the upkeep is made on use, never stored"
    again = pickle.loads(data)
    assert again.members(0) == al.members(0)
    assert again.groups.members_of(0)[2] == al.groups.members_of(0)[2]


@pytest.mark.parametrize(("module", "name"), OLD_NAMES)
def test_every_name_stored_trees_gave_a_class_still_loads(module: str, name: str) -> None:
    """Protocol 2 names a class as ``c<module>\\n<name>\\n``: the pickle of today's object, with
    its class named as an older tree named it."""
    gmm = small_gmm()
    obj = {"OnlineGMM": gmm, "PointBuffer": gmm.buffer, "IdCounter": gmm.ids}[name]
    data = pickle.dumps(obj, protocol=2)
    now = f"cingestor.cluster.online_gmm\n{name}\n".encode()
    assert now in data
    back = pickle.loads(data.replace(now, f"c{module}\n{name}\n".encode()))
    assert type(back) is type(obj)
    assert back.__dict__.keys() == obj.__dict__.keys()


def test_pickles_name_the_package_whichever_module_defines_the_class() -> None:
    gmm = small_gmm()
    gmm.add(np.array([0.1, 0.2]))
    for cls in (OnlineGMM, PointBuffer, IdCounter):
        assert cls.__module__ == "ingestor.cluster.online_gmm"
    data = pickle.dumps(gmm, protocol=5)
    assert b"online_gmm.model" not in data
    assert b"online_gmm.points" not in data
    back = pickle.loads(data)
    assert back.members == gmm.members
    assert back.point_ids == gmm.point_ids
    np.testing.assert_array_equal(back.params.covariances, gmm.params.covariances)
