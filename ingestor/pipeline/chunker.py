"""Chunk a document into leaf nodes: the part of a build its worker processes run per file.

A light module (no store, no clustering): a worker that unpickles a :class:`Chunker` imports
this and :mod:`ingestor.read`, ~0.4 s, not the whole pipeline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields

from ingestor.read.chunking import chunk_text
from ingestor.read.documents import Document
from ingestor.read.structure import Outline
from ingestor.read.tokens import Tokenizer
from ingestor.tree.state import Node, folders_of, leaf_id, sha256_text

__all__ = ["ChunkedDocument", "Chunker"]


@dataclass(frozen=True)
class Chunker:
    """Chunks a document into leaf nodes; picklable, so a build's worker processes run it.

    Attributes:
        tree: the tree's name (part of each leaf's id).
        chunk_tokens, chunk_overlap: chunk size and overlap in tokens (``ADRAP_CHUNK__*``).
        tokenizer: counts the tokens (cl100k: sent to a worker by name).
    """

    tree: str
    chunk_tokens: int
    chunk_overlap: int
    tokenizer: Tokenizer

    @property
    def key(self) -> str:
        """How it chunks, as a file's record names it: ``"250/50"`` (size / overlap)."""
        return f"{self.chunk_tokens}/{self.chunk_overlap}"

    def __call__(self, doc: Document) -> list[Node]:
        """Chunk ``doc`` into leaf nodes (ids stable while a chunk's text is unchanged).

        Its leaves share one set of sources and one of folders (immutable): ~420 bytes a leaf
        less than a pair each, for every leaf a build holds.
        """
        seen: Counter[str] = Counter()
        out = []
        sources = frozenset({doc.source})
        dirs = folders_of(sources)
        chunks = chunk_text(
            doc.text,
            max_tokens=self.chunk_tokens,
            overlap=self.chunk_overlap,
            tokenizer=self.tokenizer,
        )
        outline = Outline(doc.text, doc.regions)
        for chunk in chunks:
            digest = sha256_text(chunk.text)
            node_id = leaf_id(self.tree, doc.source, digest, seen[digest])
            seen[digest] += 1
            out.append(
                Node(
                    node_id=node_id,
                    layer=0,
                    text=chunk.text,
                    n_tokens=chunk.n_tokens,
                    content_hash=digest,
                    sources=sources,
                    dirs=dirs,
                    source=doc.source,
                    chunk_index=chunk.index,
                    char_start=chunk.char_start,
                    char_end=chunk.char_end,
                    section=outline.section(chunk.char_start, chunk.char_end),
                    locator=outline.locator(chunk.char_start, chunk.char_end),
                )
            )
        return out


@dataclass(frozen=True)
class ChunkedDocument(Document):
    """A document with its leaves, chunked where it was read (a reader process, see
    :mod:`ingestor.pipeline.readers`), so the daemon never runs the chunker on a file's text.

    Attributes:
        leaves: ``chunker(document)``.
        chunker: what chunked it; the apply stage uses ``leaves`` only while it chunks alike.
    """

    leaves: tuple[Node, ...] = ()
    chunker: Chunker | None = None

    @classmethod
    def of(cls, doc: Document, leaves: list[Node], chunker: Chunker) -> ChunkedDocument:
        """``doc`` with the leaves ``chunker`` made of it."""
        kept = {f.name: getattr(doc, f.name) for f in fields(Document)}
        return cls(**kept, leaves=tuple(leaves), chunker=chunker)
