"""Large documents in the daemon: a file with many leaves to embed is applied after the rest of
its batch, its leaves embedded outside the writer's lock a slice at a time, and the large files
of one batch land together in updates of a bounded size (ingestor.service.watcher)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ingestor.read.documents import Document

__all__ = [
    "EMBED_SLICE",
    "LARGE_DOC_LEAVES",
    "LARGE_GROUP_LEAVES",
    "changed_since_read",
    "large_groups",
]

#: A document with more leaves to embed than this is applied after the rest of its batch, its
#: leaves embedded outside the writer's lock (a 200 KB file: ~400 leaves, about a minute here).
LARGE_DOC_LEAVES = 32
#: A large document's leaves are embedded this many at a time; between two slices, the changes
#: that arrived meanwhile land (an ordinary file waits at most one slice, ~0.6 s here).
EMBED_SLICE = 4
#: Large documents of one batch land together up to this many leaves (about 20 s of embedding
#: here); the rest in further updates.
LARGE_GROUP_LEAVES = 2000


def large_groups(
    large: list[tuple[Document, list[str]]], leaves: int = LARGE_GROUP_LEAVES
) -> Iterator[list[tuple[Document, list[str]]]]:
    """The large documents of a batch in updates of about ``leaves`` leaves each: a folder of
    many copied in lands in a few updates, not one each (each a drift rebuild of a small tree,
    its summaries paid again); one larger than ``leaves`` lands alone."""
    group: list[tuple[Document, list[str]]] = []
    n = 0
    for doc, texts in large:
        if group and n + len(texts) > leaves:
            yield group
            group, n = [], 0
        group.append((doc, texts))
        n += len(texts)
    if group:
        yield group


def changed_since_read(doc: Document, path: Path) -> bool:
    """Whether the file ``doc`` was read from is gone, or another file or version now (its
    size, modification time or, where it was read, inode differ)."""
    try:
        st = path.stat()
    except OSError:
        return True
    replaced = bool(doc.inode) and st.st_ino != doc.inode
    return replaced or st.st_size != doc.size or st.st_mtime != doc.mtime
