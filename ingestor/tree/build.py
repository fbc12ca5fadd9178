"""Recursive-abstractive tree construction: Algorithm 1 of the adRAP paper (RAPTOR §3).

Leaves are chunks. While the top layer holds more than ``min_top_nodes`` nodes and there are fewer
than ``max_layers`` layers: cluster the top layer's embeddings (two-step UMAP + GMM), summarise each
cluster, embed the summaries, and make them the next layer. A cluster whose texts exceed the
summariser's input limit is clustered again, then cut in order, until it fits [RAPTOR §3].
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ingestor.cluster.adaptive import AdaptiveLayer
from ingestor.cluster.parallel import shared_pools
from ingestor.cluster.threads import one_thread
from ingestor.protocols import Summarizer
from ingestor.read.tokens import Tokenizer, default_tokenizer
from ingestor.tree.drift import drift_record
from ingestor.tree.model_rows import spilled_models
from ingestor.tree.params import BuildStats, Clusterer, Progress, TreeParams, no_progress
from ingestor.tree.state import (
    MAX_NODE_SOURCES_PARAM,
    SUMMARIZER_PARAM,
    SUMMARY_FORM_PARAM,
    TreeState,
)
from ingestor.tree.summaries import Regeneration, SummaryWriter, cache_key
from models_store import RowStore, library_versions
from retriever import Embedder
from retriever.heap import limit_heap_arenas

log = logging.getLogger(__name__)

__all__ = [
    "BuildStats",
    "Clusterer",
    "Progress",
    "Regeneration",
    "TreeBuilder",
    "TreeParams",
    "cache_key",
    "top_ids",
]


def top_ids(state: TreeState, below: AdaptiveLayer | None) -> list[str]:
    """Return the nodes of the top layer: the summaries of ``below`` (the last clustered layer),
    or every leaf of a tree without summary layers."""
    if below is None:
        return state.ids_in_layer(0)
    return list(
        dict.fromkeys(n for cid in sorted(below.cluster_nodes) for n in below.cluster_nodes[cid])
    )


class TreeBuilder:
    """Builds the summary layers of a tree whose leaves are already in the state.

    Args:
        embedder: embeds summaries (the same model as the leaves).
        summarizer: writes cluster summaries.
        make_clusterer: returns a fresh, unfitted clusterer for one layer.
        params: tree shape.
        tokenizer: counts summary tokens (cl100k_base by default).
        workers: build worker processes (``ADRAP_BUILD__WORKERS``) for what a build does beside
            clustering (whose are the clusterer's): reading and chunking its files, extractive
            summaries. The tree is the same for any number.

    These parts live in its :class:`SummaryWriter`, ``summaries`` (the summary cache,
    checkpoints, regeneration in place): read and replace them there
    (``builder.summaries.params``), the one place the builder reads them too.
    """

    def __init__(
        self,
        embedder: Embedder,
        summarizer: Summarizer,
        make_clusterer: Callable[[], Clusterer],
        params: TreeParams,
        tokenizer: Tokenizer | None = None,
        workers: int = 1,
    ) -> None:
        self.summaries = SummaryWriter(
            embedder,
            summarizer,
            make_clusterer,
            params,
            tokenizer or default_tokenizer(),
            workers=workers,
        )
        #: During a first build, its checkpoint database: each layer's local models are written
        #: there as they are fitted, none held until the commit (:mod:`ingestor.tree.model_rows`).
        self.spill_to: RowStore | None = None

    def build(
        self,
        state: TreeState,
        progress: Progress = no_progress,
        *,
        checkpoint: Callable[[TreeState], None] | None = None,
        spill_to: RowStore | None = None,
    ) -> BuildStats:
        """Replace every summary layer of ``state`` by a fresh build over its leaves.

        For this build only: ``checkpoint`` is called after each batch of paid summaries
        (:meth:`SummaryWriter.summarize_groups`), and each layer's local models go to
        ``spill_to`` as they are fitted.
        """
        # A second BLAS thread only spins (threads.py): 20k, -12 % CPU. Every layer's fit uses
        # the same worker processes, if any start (cluster/parallel.py); they stop at the end.
        limit_heap_arenas()  # the pool's threads would each keep a heap (retriever/heap.py)
        self.summaries.checkpoint, self.spill_to = checkpoint, spill_to
        try:
            with one_thread("blas"), shared_pools():
                return self._build(state, progress)
        finally:
            self.summaries.checkpoint = self.spill_to = None

    def _build(self, state: TreeState, progress: Progress) -> BuildStats:
        stats, p = BuildStats(), self.summaries.params
        state.params[MAX_NODE_SOURCES_PARAM] = p.max_node_sources  # fixed until rebuilt
        state.params[SUMMARIZER_PARAM] = self.summaries.summarizer.id
        state.params[SUMMARY_FORM_PARAM] = self.summaries.form
        for node_id in [i for i, n in state.nodes.items() if n.layer > 0]:
            del state.nodes[node_id]
            state.vectors.pop(node_id, None)
        for node_id, node in state.nodes.items():
            if node.parents:
                state.nodes.edit(node_id).parents = []
        for node_id in list(state.stale):  # every summary is made anew
            del state.stale[node_id]
        state.layers = []
        state.model_libraries = library_versions()  # every model is fitted anew
        layer = 0
        top = state.ids_in_layer(0)
        while len(top) > p.min_top_nodes and layer + 1 < p.max_layers:
            made = self.add_layer(state, layer, top, stats, progress)
            if len(made) >= len(top):
                log.info(
                    "layer %d: clustering did not reduce %d nodes; stopping", layer + 1, len(top)
                )
                self._drop_layer(state, layer, made)
                break
            layer += 1
            top = made
        state.built_at = time.time()
        state.leaves_at_build = len(state.ids_in_layer(0))
        state.added_since_build = state.removed_since_build = 0
        # every subtree at drift 0 (status said "subtrees: 0" until the first update)
        drift_record(state)
        return stats

    def settle_top(self, state: TreeState, stats: BuildStats) -> tuple[set[str], set[str]]:
        """Make Algorithm 1's condition hold again at the top of an updated tree.

        While the layer under the top has at most ``min_top_nodes`` nodes, the top layer is
        dropped (a build would have stopped under it); then, while the top layer has more than
        ``min_top_nodes`` nodes and the tree fewer than ``max_layers`` layers, the top is
        clustered into a new layer. The cost is that of the top layers only.

        Returns:
            The node ids to upsert (new summaries, nodes whose parents changed) and the node ids
            deleted.
        """
        upserted: set[str] = set()
        deleted: set[str] = set()
        p = self.summaries.params
        while state.layers and len(state.layers[-1]) <= p.min_top_nodes:
            below = state.layers.pop()
            for node_id in top_ids(state, below):
                state.nodes.pop(node_id, None)
                state.vectors.pop(node_id, None)
                deleted.add(node_id)
            for node_id in below.point_of:
                if state.nodes[node_id].parents:
                    state.nodes.edit(node_id).parents = []
                    upserted.add(node_id)
            log.info("top layer %d dropped: %d nodes under it", len(state.layers) + 1, len(below))
        while len(state.layers) + 1 < p.max_layers:
            top = top_ids(state, state.layers[-1] if state.layers else None)
            if len(top) <= p.min_top_nodes:
                break
            made = self.add_layer(state, len(state.layers), top, stats)
            if len(made) >= len(top):
                self._drop_layer(state, len(state.layers) - 1, made)
                break
            upserted.update(made)
            upserted.update(top)
        return upserted - deleted, deleted

    def _drop_layer(self, state: TreeState, layer: int, made: list[str]) -> None:
        for node_id in made:
            del state.nodes[node_id]
            state.vectors.pop(node_id, None)
        for node_id in state.ids_in_layer(layer):
            state.nodes.edit(node_id).parents = []
        state.layers.pop()

    def add_layer(
        self,
        state: TreeState,
        layer: int,
        ids: list[str],
        stats: BuildStats,
        progress: Progress = no_progress,
    ) -> list[str]:
        """Cluster nodes ``ids`` of ``layer`` (the top) into a new layer; return its node ids."""
        t0 = time.perf_counter()
        X = state.matrix(ids)
        # A first build writes each local model out as it is fitted and holds none.
        local = None if self.spill_to is None else spilled_models(self.spill_to, layer, state.clock)
        clusterer = self.summaries.make_clusterer().fit(X, local_models=local)
        p = self.summaries.params
        stats.add_time("cluster", time.perf_counter() - t0)
        clusters = {fid: [ids[i] for i in rows] for fid, rows in enumerate(clusterer.clusters_)}
        cluster_nodes = self.summaries.summarize_clusters(
            state, layer + 1, clusters, stats, progress
        )
        made = list(dict.fromkeys(n for ns in cluster_nodes.values() for n in ns))
        state.layers.append(
            AdaptiveLayer.from_fit(
                layer,
                clusterer,
                list(ids),
                cluster_nodes,
                tau_c=p.tau_c,
                tau_n=p.tau_n,
                greedy=p.greedy,
                vectors=X,
                refit_share=p.refit_share,
            )
        )
        log.info(
            "layer %d: %d nodes from %d clusters of %d",
            layer + 1,
            len(made),
            len(clusters),
            len(ids),
        )
        return made
