"""adRAP's online Gaussian mixture [A §4.3]: the local clustering of one global cluster, updated
one point at a time (Algorithm 2, Equation 3).

* :mod:`~ingestor.cluster.online_gmm.model`: :class:`OnlineGMM`, the mixture with its points and
  clusters (stable ids), and its updates: ``add``, ``add_many``, ``add_greedy``, ``remove``;
* :mod:`~ingestor.cluster.online_gmm.update`: the incremental M-step (Equation 3), the full-EM
  refit by BIC while n ≤ τ_n, the ids refitted clusters inherit, and what an update reports
  (:class:`UpdateResult`);
* :mod:`~ingestor.cluster.online_gmm.split`: a cluster's split offer by BIC, its cut in two, and
  when a cluster is offered again (:data:`REOFFER_GROWTH`);
* :mod:`~ingestor.cluster.online_gmm.points`: the point buffer and the cluster id counter.

What a tree layer keeps around its online GMMs (groups, nodes, deltas) is
:mod:`ingestor.cluster.layer_state`'s and :mod:`ingestor.cluster.group_upkeep`'s.
"""

from ingestor.cluster.online_gmm.model import OnlineGMM
from ingestor.cluster.online_gmm.points import IdCounter, PointBuffer
from ingestor.cluster.online_gmm.split import REOFFER_GROWTH, offer_due
from ingestor.cluster.online_gmm.update import UpdateResult, incremental_m_step, match_ids

__all__ = [
    "REOFFER_GROWTH",
    "IdCounter",
    "OnlineGMM",
    "PointBuffer",
    "UpdateResult",
    "incremental_m_step",
    "match_ids",
    "offer_due",
]

# A tree's state pickles these (a layer's id counter, a group's fields; whole models in trees
# stored before groups were stored by parts): their pickles name this package, whichever of its
# modules defines them, so the stored name does not follow the files. Older names stay
# importable for older trees: ingestor.cluster.points and ingestor.cluster.incremental.
for stored in (OnlineGMM, IdCounter, PointBuffer):
    stored.__module__ = __name__
del stored
