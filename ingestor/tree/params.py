"""What a tree's construction is given and reports: its shape (:class:`TreeParams`), the clustering
estimator it fits per layer (:class:`Clusterer`), progress callbacks and the build's costs
(:class:`BuildStats`). Shared by the builder (:mod:`ingestor.tree.build`), the summary writer
(:mod:`ingestor.tree.summaries`) and adRAP's updates (:mod:`ingestor.tree.adrap`)."""

from __future__ import annotations

from collections.abc import Callable, MutableSequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

import numpy as np
from numpy.typing import NDArray

from ingestor.cluster.layer_state import REFIT_SHARE

__all__ = ["BuildStats", "Clusterer", "Progress", "TreeParams", "no_progress"]

#: ``progress(stage, done, total)``: called as work advances (the CLI draws a bar from it).
Progress = Callable[[str, int, int], None]


def no_progress(stage: str, done: int, total: int) -> None:
    """A :data:`Progress` that reports nowhere."""
    return None


class Clusterer(Protocol):
    """The clustering estimator of one layer (``ingestor.cluster.two_step.TreeClusterer``): what
    the build and adRAP's updates (``ingestor.cluster.adaptive`` and the group upkeep around it)
    read and change of it.

    A build calls :meth:`fit` and reads ``clusters_``. An update routes new nodes with
    :meth:`predict_global` and :meth:`transform_local`, wraps the fit's ``local_models_`` (one per
    global cluster, replaced when a group is refitted) and ``n_clusters_``, refits a group with
    :meth:`reduce_local` and :meth:`build_group_size`, and cuts a group past ``max_group`` by
    changing ``global_gmm_`` and ``global_components_`` in :meth:`transform_global`'s space.
    """

    clusters_: list[tuple[int, ...]]
    n_clusters_: int
    global_gmm_: Any
    global_components_: NDArray[np.intp]
    threshold: float
    random_state: int | None
    max_group: int | None

    @property
    def local_models_(self) -> MutableSequence[Any]:
        """One local model per global cluster (the tree's store swaps in a lazy list)."""

    def fit(
        self, X: NDArray[np.float32], *, local_models: MutableSequence[Any] | None = None
    ) -> Self:
        """Cluster X; ``local_models``: an empty sequence the local models go to as fitted."""

    def predict_global(self, X: NDArray[np.floating]) -> NDArray[np.intp]: ...

    def transform_global(self, X: NDArray[np.floating]) -> NDArray[np.float32]: ...

    def transform_local(self, g: int, X: NDArray[np.floating]) -> NDArray[np.float32]: ...

    def reduce_local(self, X: NDArray[np.floating]) -> tuple[Any, NDArray[np.float32]]: ...

    def build_group_size(self) -> float | None: ...


@dataclass(frozen=True)
class TreeParams:
    """Shape of the tree and of its summaries."""

    max_layers: int = 5
    min_top_nodes: int = 10
    summary_max_tokens: int = 150
    max_input_tokens: int | None = None
    tau_c: int = 11
    #: Full-EM size of the online GMMs [A Algorithm 2]; None: the paper's max(100, √n), which
    #: makes an insert cost grow as the square root of the layer (see AdaptiveLayer.from_fit).
    tau_n: int | None = 100
    greedy: bool = False
    #: A group is refitted once more than ``max(tau_c, refit_share x`` its fitted size) of its
    #: points changed (``ingestor.cluster.layer_state.REFIT_SHARE``); an update applies the
    #: running value to a tree built with another.
    refit_share: float = REFIT_SHARE
    #: A summary over more files (folders) than this lists none (``sources_capped``; 0: lists
    #: all, and an update then rewrites lists as long as the collection). Recorded in the state
    #: at a build: a tree keeps the limit it was built with until it is rebuilt.
    max_node_sources: int = 100
    #: An update keeps a summary's text while its children changed by less than this fraction
    #: of their tokens, adding up (``ingestor.tree.tolerance``; 0: every change regenerates).
    min_change: float = 0.0
    #: ... and ignores a soft membership gained or lost within this of the clusterer's
    #: threshold (0: every membership counts).
    soft_margin: float = 0.0


@dataclass
class BuildStats:
    """What a build cost, stage by stage (seconds), and what it made."""

    seconds: dict[str, float] = field(default_factory=dict)
    summary_calls: int = 0
    cache_hits: int = 0
    summary_tokens: int = 0  # as the summariser reports them (prompt + completion; 0: none)
    summary_input_tokens: int = 0  # the children's tokens of every summary paid for
    clusters_per_layer: dict[int, int] = field(default_factory=dict)
    mean_cluster_size: dict[int, float] = field(default_factory=dict)

    def add_time(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
