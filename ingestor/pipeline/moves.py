"""A moved or renamed file keeps its place in the tree.

Leaf ids include the file's path, so a file that moved has new leaf ids. Removing the old leaves
and placing the new ones (as any new file's) put them in other clusters and regenerated most
summaries above them, paying an LLM again for text it had already summarised: a folder of 12
files moved in a 36-file tree regenerated 49 of its 62 summaries. A move is not a change of text.

So when an update removes a file and adds one with the same text (its content hash and every
leaf's, in order), the new leaves take the old ones' places: the layer's clusters hold the new
ids where the old ones were, the summaries over them keep their text, vector and id, and only
their ``children`` and provenance (files, folders, readers) change, as a permission change
changes them. Nothing is embedded or summarised. A file moved and edited in one update, or
whose old vectors the store lost (after a crash), is removed and placed as before.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from ingestor.read.documents import Document
from ingestor.read.listing import Listings, confirmed_gone, source_path
from ingestor.tree.state import Node, TreeState
from retriever.errors import StoreError

__all__ = ["MoveFinder", "move_leaves", "moved_from"]

log = logging.getLogger(__name__)


class MoveFinder:
    """The removed files of one update by content hash, each given to at most one new file."""

    def __init__(self, state: TreeState, docs: Iterable[Document], gone: Iterable[str]) -> None:
        new_hashes = {d.content_hash for d in docs if d.source not in state.sources}
        self._by_hash: dict[str, list[str]] = defaultdict(list)
        for source in dict.fromkeys(gone):
            entry = state.sources.peek(source)
            if entry is not None and entry.content_hash in new_hashes:
                self._by_hash[entry.content_hash].append(source)

    def take(self, state: TreeState, doc: Document, leaves: list[Node]) -> str | None:
        """Return the removed file ``doc`` moved from (and forget it), or None: the first removed
        file with the same text whose leaves have ``leaves``' texts, in order."""
        candidates = self._by_hash.get(doc.content_hash, [])
        for i, source in enumerate(candidates):
            entry = state.sources.peek(source)
            if entry is None:
                continue
            olds = [state.nodes.peek(n) for n in entry.node_ids]
            if len(olds) == len(leaves) and all(
                o is not None and o.content_hash == n.content_hash
                for o, n in zip(olds, leaves, strict=True)
            ):
                del candidates[i]
                return source
        return None


def moved_from(
    state: TreeState, docs: Iterable[Document], gone: Iterable[str], root: Path
) -> list[str]:
    """Return the indexed files the new files of ``docs`` may have moved from, beyond ``gone``:
    those with a new file's content hash that are gone from the share (:func:`confirmed_gone`:
    absent from a successful listing, never "cannot be listed now").

    For an update given only the new place of a move. They are gone, so they are removed
    whether or not :class:`MoveFinder` pairs them. Reads every file's record once, and only
    when ``docs`` holds a file the tree does not know (~1 s at 100k files).
    """
    docs = list(docs)
    new = {d.content_hash for d in docs if d.source not in state.sources}
    if not new:
        return []
    taken = set(gone) | {d.source for d in docs}
    listed: Listings = {}  # one listing a folder
    found = [
        source
        for source, entry in state.sources.items()
        if entry.content_hash in new
        and source not in taken
        and confirmed_gone(source_path(root, source), root, listed)
    ]
    if found:
        log.info("%d files of this update were moved from: %s", len(found), ", ".join(found[:5]))
    return found


def move_leaves(state: TreeState, old_ids: list[str], leaves: list[Node]) -> bool:
    """Put ``leaves`` (a moved file's, not yet in ``state``) in the places of ``old_ids`` (its
    leaves under the old name, in order): their vectors, parents and clusters; the parents list
    the new ids. Return False, changing nothing, when an old vector cannot be read (the store
    lost it): the caller then places the leaves as new ones."""
    try:
        vectors = state.matrix(old_ids)
    except StoreError as exc:
        log.info("a moved file's leaves are placed again: their vectors cannot be read (%s)", exc)
        return False
    layer = state.layers[0] if state.layers else None
    for old_id, leaf, vec in zip(old_ids, leaves, vectors, strict=True):
        old = state.nodes.pop(old_id)
        state.vectors.pop(old_id, None)
        leaf.parents = list(old.parents)
        state.nodes[leaf.node_id] = leaf
        state.vectors[leaf.node_id] = vec
        if layer is not None:
            layer.rename(old_id, leaf.node_id)
        for p in old.parents:
            parent = state.nodes.edit(p)
            parent.children = [leaf.node_id if c == old_id else c for c in parent.children]
    return True
