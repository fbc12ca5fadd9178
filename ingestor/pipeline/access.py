"""Access classes in the pipeline: each file's class on its leaves and its source entry, and a
permission change applied as an edit of the points' payloads (no embedding, no summary).

A leaf carries its file's class; a summary the union of its children's
(:class:`~ingestor.tree.state.Provenance`), so a summary is served only to who may read every file
it was written from (:mod:`ingestor.read.permissions`). The clustering does not look at classes:
a folder of one owner builds the tree it always built.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from ingestor.read.access_classes import UNKNOWN_CLASS, ClassRegistry
from ingestor.read.names import fs_name
from ingestor.read.permissions import AccessFile, AccessReader
from ingestor.tree.state import Node, TreeState

__all__ = ["TreeAccess", "named_classes"]

log = logging.getLogger(__name__)

#: An edited access file is read once its last write is this old (seconds).
SETTLE_SECONDS = 1.0


class TreeAccess:
    """Reads files' access classes under a tree's root and records them in the registry.

    Args:
        registry: the classes the tree's points name (the state dir's file; queries judge them).
        access_file: folder prefixes mapped to readers, for mounts without permissions.
        access_path: where ``access_file`` was read from: read again at the start of a pass
            once it changed (an edit is a permission change), kept as it was if the new text
            is malformed (said once, as an ERROR). An edit is read once the file has been
            still for :data:`SETTLE_SECONDS` (or two passes found it unchanged): a pass that met
            it half written would apply what it held then.
    """

    def __init__(
        self,
        registry: ClassRegistry | None = None,
        access_file: AccessFile | None = None,
        access_path: Path | None = None,
    ) -> None:
        self.registry = registry if registry is not None else ClassRegistry(None)
        self.access_file = access_file or AccessFile()
        self._access_path = access_path
        self._access_stamp = _stamp(access_path)
        self._access_seen = self._access_stamp  # the stamp the last pass found
        self._reader: AccessReader | None = None
        self._root = ""
        #: Files per access class at the last full reading (:meth:`changed` of every source).
        self.counts: dict[str, int] = {}
        self._known: frozenset[str] = frozenset()  # the registry's classes as that reading began

    def reader(self, root: str | Path) -> AccessReader:
        if self._reader is None or self._root != str(root):
            self._root = str(root)
            self._reader = AccessReader(Path(root), self.access_file)
        return self._reader

    def begin(self, root: str | Path) -> None:
        """A pass over the folder starts: folders' permissions are read again, and the access
        file if it changed."""
        self._reload()
        self.reader(root).forget()

    def _reload(self) -> None:
        stamp = _stamp(self._access_path)
        if self._access_path is None or stamp == self._access_stamp:
            return
        seen, self._access_seen = self._access_seen, stamp
        if stamp is not None and stamp != seen and time.time() - stamp[2] / 1e9 < SETTLE_SECONDS:
            # being written: a file truncated and written again reads empty (no rules: every file
            # left to the file system, on a mount where everyone may read) for an instant
            return
        try:
            rules = AccessFile.load(self._access_path)
        except ValueError as exc:
            self._access_stamp = stamp
            log.error("%s; its earlier rules are kept until it is fixed", exc)
            return
        if _stamp(self._access_path) != stamp:  # written while it was read: the next pass
            return
        self._access_stamp = stamp
        self.access_file, self._reader = rules, None
        log.info(
            "access file %s read again: %d prefixes, %d SIDs",
            self._access_path,
            len(rules.rules),
            len(rules.sids),
        )

    def class_of(self, root: str | Path, source: str) -> str:
        """Return the id of ``source``'s access class, registered before any point names it."""
        cls = self.reader(root).class_of(source)
        self.registry.add(cls)
        return cls.id

    def class_kept(self, root: str | Path, source: str, kept: str) -> str:
        """:meth:`class_of` for a file whose text is indexed with class ``kept``: a file whose
        permissions cannot be read because it is not there now (the share went away while it
        was read) keeps ``kept``; one that is there and unreadable becomes readable by nobody."""
        new = self.class_of(root, source)
        if new == UNKNOWN_CLASS and not _present(root, source):
            return kept
        return new

    def changed(self, state: TreeState, sources: Iterable[str] | None = None) -> dict[str, str]:
        """Return ``{source: new class}`` for the indexed files whose class is not the one their
        leaves carry (every source, or ``sources``); reads permissions only, never content.

        A file that is not there (the share went away or was unmounted, or the file was removed
        or renamed) keeps its class: what cannot be found now is the watcher's to judge (a
        removal, or a share that comes back), and its text was its readers' already. Only a file
        that is there but whose permissions cannot be read becomes readable by nobody."""
        self.begin(state.root)
        out = {}
        if sources is None:
            self._known = self.registry.ids()  # a class added from here on is kept
            pairs = state.sources.items()
        else:
            pairs = [(s, e) for s in sources if (e := state.sources.get(s)) is not None]
        counts: dict[str, int] = {}
        for source, entry in pairs:
            new = self.class_kept(state.root, source, entry.access)
            counts[new] = counts.get(new, 0) + 1
            if new != entry.access:
                out[source] = new
        if sources is None:
            self.counts = counts
        return out

    def forget_unnamed(self, state: TreeState) -> int:
        """After a full reading (:meth:`changed` of every source) applied: forget the classes
        no point names any more (:meth:`ClassRegistry.retain`); return how many."""
        gone = self.registry.retain(named_classes(state, self.counts), self._known)
        if gone:
            log.info("access classes: %d no longer named by any point forgotten", gone)
        return gone


def named_classes(state: TreeState, counts: dict[str, int]) -> set[str]:
    """The classes the tree's points name, from a full reading's ``counts`` (files per class:
    every leaf names its file's class, every summary a union of its children's) and the stale
    summaries (which keep the classes they had until they are regenerated)."""
    out = set(counts)
    for node_id in state.stale:
        node = state.nodes.get(node_id)
        if node is not None:
            out |= node.access
    return out


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    """What tells an edit of ``path`` (None: not there)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _present(root: str | Path, source: str) -> bool:
    """Return whether ``source`` (relative to ``root``) is there to judge: found, or refused
    (``EACCES``/``EPERM``: there, and its permissions are what stops the daemon). Not found, or
    a share that does not answer (``ENOTCONN``, ``ESTALE``, ``EIO``...), is not there."""
    try:
        os.lstat(os.path.join(root, fs_name(source)))
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def set_leaf_access(state: TreeState, leaf_ids: Iterable[str], access: str) -> list[str]:
    """Give the leaves ``leaf_ids`` the class ``access``; return the ids that changed."""
    out = []
    want = frozenset({access})
    for node_id in leaf_ids:
        node: Node | None = state.nodes.peek(node_id)
        if node is not None and node.access != want:
            state.nodes.edit(node_id).access = want
            out.append(node_id)
    return out
