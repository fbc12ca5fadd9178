"""Summaries of clusters: the summary cache, batches that are checkpointed, and adRAP's
regeneration in place (a regenerated summary keeps its node id).

:class:`SummaryWriter` turns clusters of node ids into summary nodes; a
:class:`~ingestor.tree.build.TreeBuilder` holds one and adds the layers (Algorithm 1) around it.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ingestor.protocols import Summarizer
from ingestor.read.tokens import Tokenizer
from ingestor.tree import summary_calls as calls
from ingestor.tree.params import BuildStats, Clusterer, Progress, TreeParams, no_progress
from ingestor.tree.state import Node, Provenance, TreeState, sha256_text, summary_id
from retriever import Embedder


def cache_key(summarizer: Summarizer, max_tokens: int, child_hashes: Sequence[str]) -> str:
    """Return the summary-cache key: summariser, prompt version, length and children's distinct
    texts (a cluster that gained only copies of texts it held, a copied file's leaves, is the
    same summary: see :meth:`SummaryWriter.summarize_groups`)."""
    h = hashlib.sha256(f"{summarizer.id}\0{summarizer.prompt_version}\0{max_tokens}".encode())
    for c in sorted(set(child_hashes)):
        h.update(c.encode())
    return h.hexdigest()


def token_change(old: Sequence[int], new: Sequence[int]) -> int:
    """Return how many tokens ``new`` gained and lost against ``old`` (as multisets)."""
    a, b = Counter(old), Counter(new)
    return (a - b).total() + (b - a).total()


@dataclass
class Regeneration:
    """An update's summary regeneration in place (adRAP): what it may reuse, what it did.

    Attributes:
        reuse: per regenerated cluster, its previous summary nodes it may rewrite in place.
        changed: nodes rewritten in place below (same id, new content): a summary over them is
            regenerated even when its children's ids are the same.
        created: summary nodes made new.
        rewritten: summary nodes rewritten in place (same id, new text, children, embedding).
        relinked: nodes whose parents changed.
        refreshed: summary nodes regenerated because their children changed (members came or
            went, or one was rewritten), whose text came out the same: they keep their vector
            (not embedded again) and their place in the layer above, whose clusters see only
            vectors; only their children and sources change, and nothing above is regenerated
            for them. With the extractive summariser about a quarter of the summaries whose
            membership changed (bench/update.py, 2k leaves).
        made: the summary nodes of the regenerated clusters, in cluster order, each once.
        text_change: per node rewritten, the tokens its text gained and lost (the drift it
            brings to the summaries over it: :mod:`ingestor.tree.tolerance`).
    """

    reuse: dict[int, list[str]] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    created: set[str] = field(default_factory=set)
    rewritten: set[str] = field(default_factory=set)
    relinked: set[str] = field(default_factory=set)
    refreshed: set[str] = field(default_factory=set)
    made: list[str] = field(default_factory=list)
    text_change: dict[str, int] = field(default_factory=dict)


class SummaryWriter:
    """Turns clusters of node ids into summary nodes (a ``TreeBuilder``'s ``summaries``).

    Args:
        embedder: embeds the summaries.
        summarizer: writes them.
        make_clusterer: a fresh clusterer, to cut a cluster past the summariser's input limit.
        params: summary length and input limit (``summary_max_tokens``, ``max_input_tokens``).
        tokenizer: counts a summary's tokens.
        checkpoint: when set (by a build), called with the state after each batch of paid
            summaries, to make them durable before the build goes on (``summarize_groups``).
    """

    def __init__(
        self,
        embedder: Embedder,
        summarizer: Summarizer,
        make_clusterer: Callable[[], Clusterer],
        params: TreeParams,
        tokenizer: Tokenizer,
        checkpoint: Callable[[TreeState], None] | None = None,
        workers: int = 1,
    ) -> None:
        self.embedder = embedder
        self.summarizer = summarizer
        self.make_clusterer = make_clusterer
        self.params = params
        self.tokenizer = tokenizer
        self.checkpoint = checkpoint
        self.workers = workers

    @property
    def form(self) -> str:
        """How its summaries are written: the summariser's prompt (or algorithm) version and
        their length in tokens (both part of the summary cache's key)."""
        return f"{self.summarizer.prompt_version}, {self.params.summary_max_tokens} tokens"

    def summarize_clusters(
        self,
        state: TreeState,
        layer: int,
        clusters: dict[int, list[str]],
        stats: BuildStats,
        progress: Progress = no_progress,
        regen: Regeneration | None = None,
    ) -> dict[int, list[str]]:
        """Make the summary node(s) of each cluster of node ids; return cluster id → node ids.

        Each cluster becomes one node of ``layer``, or several when its texts exceed the
        summariser's input limit [RAPTOR §3]. Soft clustering can give two clusters one
        membership: that membership is summarised once. Empty clusters are left out.

        A membership that already has its node (same children, none of them changed) keeps it
        as it is. Otherwise, when ``regen.reuse`` offers a cluster its previous summary node(s),
        the new summary is written under the old id: the nodes under it and over it keep their
        links, so an update rewrites the summaries it regenerates, not their children [cost,
        issue 8]. Else the node is new, content-addressed by its children.
        """
        state.nodes.prefetch(n for m in clusters.values() for n in m)  # one query, not one a node
        parts = {cid: self._fit_input_limit(state, m) for cid, m in clusters.items() if m}
        groups = list({tuple(sorted(g)): g for ps in parts.values() for g in ps}.values())
        stats.clusters_per_layer[layer] = len(groups)
        stats.mean_cluster_size[layer] = float(np.mean([len(g) for g in groups])) if groups else 0.0
        ids = [summary_id(state.tree, layer, g) for g in groups]
        if regen is not None:
            self._avoid_taken(state, layer, groups, ids, regen.reuse)
        if regen is not None and regen.reuse:
            self._reuse_ids(state, parts, groups, ids, regen.reuse)
        made = self.add_summaries(state, layer, groups, stats, progress, ids, regen)
        node_of = {tuple(sorted(g)): n for g, n in zip(groups, made, strict=True)}
        return {
            cid: list(dict.fromkeys(node_of[tuple(sorted(g))] for g in ps))
            for cid, ps in parts.items()
        }

    @staticmethod
    def _avoid_taken(
        state: TreeState,
        layer: int,
        groups: list[list[str]],
        ids: list[str],
        reuse: dict[int, list[str]],
    ) -> None:
        """Move each membership off a content address that names another cluster's node.

        An update rewrites a regenerated summary in place, under its old id, so a node's id is
        not always the address of its children: a cluster that comes back to the membership
        which first made an id finds that id on a node with other children. That node belongs to
        another cluster unless every cluster naming it is regenerated now (it is in ``reuse``);
        taking it would rewrite the summary of a cluster left as it was and orphan its children
        (soak, seed 1: three leaves lost their parent in batch 14). Such a membership gets the
        next free salted address (:func:`summary_id`) instead.
        """
        free = {n for ns in reuse.values() for n in ns}
        state.nodes.prefetch(ids)
        for i, g in enumerate(groups):
            salt = 0
            while (
                (node := state.nodes.peek(ids[i])) is not None
                and ids[i] not in free
                and sorted(node.children) != sorted(g)
            ):
                salt += 1
                ids[i] = summary_id(state.tree, layer, g, salt)

    @staticmethod
    def _reuse_ids(
        state: TreeState,
        parts: dict[int, list[list[str]]],
        groups: list[list[str]],
        ids: list[str],
        reuse: dict[int, list[str]],
    ) -> None:
        """Give each new membership an old summary id of its cluster, where one is free."""
        index = {tuple(sorted(g)): i for i, g in enumerate(groups)}
        state.nodes.prefetch(ids)
        claimed = {n for n in ids if n in state.nodes}  # memberships whose node exists
        for cid, ps in sorted(parts.items()):
            free = [n for n in reuse.get(cid, []) if n not in claimed]
            for g in ps:
                i = index[tuple(sorted(g))]
                if ids[i] in claimed or not free:
                    continue
                ids[i] = free.pop(0)
                claimed.add(ids[i])

    def add_summaries(
        self,
        state: TreeState,
        layer: int,
        groups: list[list[str]],
        stats: BuildStats,
        progress: Progress = no_progress,
        ids: list[str] | None = None,
        regen: Regeneration | None = None,
    ) -> list[str]:
        """Summarise and embed each group of node ids into a node of ``layer``; link parents.

        ``ids`` default to content addresses (by children). A group whose node already exists
        with these children, none of them in ``regen.changed``, is reused as it is. A node that
        exists otherwise is rewritten in place (children it lost drop it from their parents).
        ``regen`` collects what was created, rewritten and relinked.
        """
        if ids is None:
            ids = [summary_id(state.tree, layer, g) for g in groups]
        regen = regen if regen is not None else Regeneration()
        first: dict[str, int] = {}
        for i, node_id in enumerate(ids):
            first.setdefault(node_id, i)
        todo: list[int] = []
        for node_id, i in first.items():
            old = state.nodes.peek(node_id)
            if old is None:
                regen.created.add(node_id)
            elif sorted(old.children) != sorted(groups[i]):
                self._unlink_children(state, old, set(groups[i]), regen.relinked)
                regen.rewritten.add(node_id)
            elif old.stale or not regen.changed.isdisjoint(groups[i]):
                regen.rewritten.add(node_id)
            else:
                continue
            todo.append(i)
        t0 = time.perf_counter()
        texts = self.summarize_groups(state, [groups[i] for i in todo], stats, progress, layer)
        stats.add_time("summarize", time.perf_counter() - t0)
        digests = [sha256_text(text) for text in texts]
        olds = [state.nodes.peek(ids[i]) for i in todo]
        same = {
            j for j, old in enumerate(olds) if old is not None and old.content_hash == digests[j]
        }
        embed = [j for j in range(len(todo)) if j not in same]
        t0 = time.perf_counter()
        fresh: dict[int, NDArray[np.float32]] = {}
        if embed:
            vectors = self.embedder.embed_documents([texts[j] for j in embed])
            fresh = dict(zip(embed, vectors, strict=True))
        stats.add_time("embed_summaries", time.perf_counter() - t0)
        now = time.time()
        for j, (i, text, digest, old) in enumerate(zip(todo, texts, digests, olds, strict=True)):
            members = groups[i]
            tokens = self.tokenizer.encode(text)
            if j in same:
                regen.rewritten.discard(ids[i])  # the same text: keep its vector and place
                regen.refreshed.add(ids[i])
                vec = state.vectors[ids[i]]
            else:
                vec = fresh[j]
                if old is not None:
                    regen.text_change[ids[i]] = token_change(
                        self.tokenizer.encode(old.text), tokens
                    )
            prov = Provenance.merge([_node(state, c) for c in members], state.max_node_sources)
            state.nodes[ids[i]] = Node(
                node_id=ids[i],
                layer=layer,
                text=text,
                n_tokens=len(tokens),
                content_hash=digest,
                sources=prov.sources,
                sources_capped=prov.sources_capped,
                dirs=prov.dirs,
                dirs_capped=prov.dirs_capped,
                access=prov.access,
                children=list(members),
                parents=list(old.parents) if old is not None else [],
                summarizer=self.summarizer.id,
                updated_at=now,
            )
            state.vectors[ids[i]] = vec
            for c in members:
                if ids[i] not in _node(state, c).parents:
                    state.nodes.edit(c).parents.append(ids[i])
                    regen.relinked.add(c)
        return ids

    @staticmethod
    def _unlink_children(state: TreeState, node: Node, keep: set[str], relinked: set[str]) -> None:
        """Drop ``node`` from the parents of its children not in ``keep``."""
        for c in node.children:
            if c in keep:
                continue
            child = state.nodes.peek(c)
            if child is not None and node.node_id in child.parents:
                state.nodes.edit(c).parents.remove(node.node_id)
                relinked.add(c)

    def summarize_groups(
        self,
        state: TreeState,
        groups: list[list[str]],
        stats: BuildStats,
        progress: Progress = no_progress,
        layer: int = 1,
    ) -> list[str]:
        """Return one summary per group of node ids, reusing the content-addressed cache.

        Missing summaries are paid for in batches of about ``SUMMARY_BATCH_SECONDS`` (see
        :mod:`ingestor.tree.summary_calls`: a round of the summariser's concurrency, or of the
        build's workers for an extractive one, at least); after each,
        ``self.checkpoint(state)`` (when set: a build) stores them, then ``progress`` may stop
        the build (the daemon's SIGTERM). So a stopped or killed build loses one batch at most.
        """
        max_tokens = self.params.summary_max_tokens
        keys = [
            cache_key(self.summarizer, max_tokens, [_node(state, c).content_hash for c in g])
            for g in groups
        ]
        state.summary_cache.prefetch(keys)  # one query (a checkpoint or a stored cache)
        missing = [i for i, k in enumerate(keys) if k not in state.summary_cache]
        stats.cache_hits += len(groups) - len(missing)
        stage = f"summaries L{layer}"
        progress(stage, len(groups) - len(missing), len(groups))
        floor = calls.batch_floor(self.summarizer, self.workers)
        start, size = 0, floor
        while start < len(missing):
            todo = missing[start : start + size]
            texts = [_distinct_texts(state, groups[i]) for i in todo]
            stats.summary_input_tokens += sum(n for kids in texts for n in kids.values())
            before, t0 = calls.tokens_used(self.summarizer), time.perf_counter()
            out = calls.summarize_many(
                self.summarizer, [list(kids) for kids in texts], max_tokens, self.workers
            )
            size = calls.next_batch(len(todo), time.perf_counter() - t0, floor)
            stats.summary_calls += len(todo)
            stats.summary_tokens += calls.tokens_used(self.summarizer) - before
            for i, summary in zip(todo, out, strict=True):
                state.summary_cache[keys[i]] = summary
            if self.checkpoint is not None:
                self.checkpoint(state)
            start += len(todo)
            progress(stage, len(groups) - len(missing) + start, len(groups))
        return [state.summary_cache[k] for k in keys]

    def _fit_input_limit(self, state: TreeState, members: list[str]) -> list[list[str]]:
        """Cut a cluster whose texts exceed the summariser's input limit [RAPTOR §3].

        The cluster is clustered again, or cut in order when clustering cannot separate it,
        until every part fits; parts keep the members' order.
        """
        limit = self.params.max_input_tokens
        if limit is None or sum(_node(state, m).n_tokens for m in members) <= limit:
            return [list(members)]
        X = state.matrix(members)
        out: list[list[int]] = []
        todo = [list(range(len(members)))]
        while todo:
            g = todo.pop()
            total = sum(_node(state, members[i]).n_tokens for i in g)
            if total <= limit or len(g) == 1:
                out.append(g)
                continue
            sub = [[g[j] for j in c] for c in self.make_clusterer().fit(X[g]).clusters_]
            if len(sub) <= 1 or any(len(s) == len(g) for s in sub):
                half = len(g) // 2  # clustering cannot separate it: cut it in order
                sub = [g[:half], g[half:]]
            todo.extend(sub)
        return [[members[i] for i in g] for g in sorted(out, key=lambda g: g[0])]


def _distinct_texts(state: TreeState, members: list[str]) -> dict[str, int]:
    """Return the members' texts, each once, in order, with their tokens: a copy (a copied
    file's leaf) adds nothing to summarise, and an LLM would be paid to read it twice, an
    extractive summary might quote it twice."""
    texts: dict[str, int] = {}
    for m in members:
        node = _node(state, m)
        texts.setdefault(node.text, node.n_tokens)
    return texts


def _node(state: TreeState, node_id: str) -> Node:
    """Read a node (to change it, take it with ``state.nodes.edit``)."""
    node = state.nodes.peek(node_id)
    if node is None:
        raise KeyError(node_id)
    return node
