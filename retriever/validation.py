"""Checks and result assembly shared by the store adapters, so both behave the same way."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from retriever.errors import StoreError
from retriever.schema import META_POINT_ID, META_TREE, VECTOR_NAME, F, NodePayload


def dense(vector: Any) -> Sequence[float]:
    """The dense vector of a record's ``vector`` (named or not), not copied."""
    if isinstance(vector, dict):
        return cast("Sequence[float]", vector[VECTOR_NAME])
    return cast("Sequence[float]", vector)


def point_key(point_id: uuid.UUID | str | int) -> int:
    """A point id as an integer key (its UUID's integer; a hit's id is a ``uuid.UUID``): the
    access map's and the readers' copies' (retriever.access_map, retriever.reader_copy)."""
    if isinstance(point_id, uuid.UUID):
        return point_id.int
    if isinstance(point_id, int):
        return point_id
    return uuid.UUID(point_id).int


def check_ids(node_ids: Sequence[str]) -> list[str]:
    """Return the ids as canonical uuid strings.

    Raises:
        ValueError: an id is not a uuid (adrap node ids are point ids, see ``point_id``).
    """
    if isinstance(node_ids, str):
        raise ValueError("node_ids must be a sequence of ids, not one string")
    out = []
    for node_id in node_ids:
        try:
            out.append(str(uuid.UUID(node_id)))
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"node id {node_id!r} is not a uuid point id") from exc
    return out


def check_page(limit: int, offset: str | None) -> str | None:
    """Check a scroll page's ``limit`` and ``offset``; return the offset as a canonical uuid.

    Raises:
        ValueError: ``limit < 1`` or ``offset`` is not a node id.
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    return None if offset is None else check_ids([offset])[0]


def check_fields(fields: Sequence[str]) -> list[str]:
    """Check payload ``fields`` to read (:meth:`~retriever.protocols.NodeStore.scroll_fields`):
    names of :class:`~retriever.schema.NodePayload`'s fields, at least one; return them.

    Raises:
        ValueError: none given, or one is not a node's field.
    """
    keys = list(dict.fromkeys(fields))
    known = NodePayload.model_fields
    bad = [k for k in keys if k not in known]
    if not keys or bad:
        raise ValueError(
            f"payload fields to read must be node fields, got {bad or keys!r}; "
            f"use names of retriever.schema.F such as {F.NODE_ID!r} or {F.LAYER!r}"
        )
    return keys


def check_node(node: NodePayload) -> None:
    if node.tree == META_TREE or node.node_id == META_POINT_ID:
        raise ValueError(f"node {node.node_id!r} uses the reserved meta tree/point id")
    check_ids([node.node_id])


def check_vectors(
    nodes: Sequence[NodePayload], vectors: NDArray[np.float32], dim: int | None
) -> NDArray[np.float32]:
    arr = np.ascontiguousarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != len(nodes):
        raise ValueError(
            f"vectors must have shape ({len(nodes)}, dim) for {len(nodes)} nodes, "
            f"got {np.shape(vectors)}"
        )
    if dim is not None and len(nodes) and arr.shape[1] != dim:
        raise ValueError(f"vectors have {arr.shape[1]} dimensions but the store holds {dim}-d")
    if len(nodes) and not (np.isfinite(arr).all() and (np.abs(arr).max(axis=1) > 0).all()):
        raise ValueError("vectors must be finite and non-zero (cosine needs a direction)")
    return arr


def check_query(vector: NDArray[np.float32], dim: int | None) -> list[float]:
    arr = np.asarray(vector, dtype=np.float32)
    if arr.ndim != 1 or (dim is not None and arr.shape[0] != dim):
        raise ValueError(f"query vector must have shape ({dim or 'dim'},), got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("query vector must be finite")
    return arr.tolist()  # type: ignore[no-any-return]


def ordered_payloads(found: dict[str, Any], ids: Sequence[str]) -> list[NodePayload]:
    """Return the payloads of the records found, in the order of ``ids`` (canonical, as
    :func:`check_ids` returns them; missing skipped)."""
    return [NodePayload.from_payload(found[i].payload) for i in ids if i in found]


def ordered_vectors(
    found: dict[str, Any], ids: list[str], dim: int | None, where: str
) -> NDArray[np.float32]:
    """Return the ``(n, dim)`` vectors of ``ids`` from the records found.

    Raises:
        StoreError: some ids have no point (named in the message).
    """
    missing = [i for i in ids if i not in found]
    if missing:
        raise StoreError(
            f"{where} has no point for {len(missing)} node id(s) {missing[:5]}; "
            "the store and the tree state disagree: restart adrap to reconcile, "
            "or run `adrap rebuild`"
        )
    rows = [dense(found[i].vector) for i in ids]
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), -1 if rows else (dim or 0))
