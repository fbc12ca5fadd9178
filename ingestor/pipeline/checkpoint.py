"""A first build's node vectors, checkpointed beside the state until its points are written.

A first build has no committed tree to fall back on, so what it pays for is kept as it goes in
``checkpoint-<tree>.sqlite`` (see :mod:`ingestor.tree.persist`): the summaries (``cache`` rows)
and, here, every node's vector (``vector`` rows: the float32 bytes the embedder gave, so a
resumed build clusters the very same input). The node store is written only after the tree is
committed and let go (:meth:`~ingestor.pipeline.context.TreeContext.fill_store`), from the
state database and these rows, so the engine's points and the builder's tree are never in memory
at the same time. A build killed before its commit resumes from these rows without embedding the
leaves again; one killed after it is finished by recovery from the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from ingestor.errors import TreeError
from models_store import Changes, ModelStoreError, RowStore

__all__ = ["PUT_BATCH", "CheckpointVectors"]

#: Vectors per checkpoint transaction at most (the leaves come a batch of 128 at a time).
PUT_BATCH = 2048
_NS = "vector"


class CheckpointVectors:
    """Node vectors by id in a first build's checkpoint database (which the caller closes).

    Attributes:
        rows: the checkpoint database.
    """

    def __init__(self, rows: RowStore) -> None:
        self.rows = rows

    def ids(self) -> set[str]:
        """The nodes whose vector is kept (an interrupted build's)."""
        return set(self.rows.keys_prefix(_NS, ""))

    def put(self, ids: Sequence[str], vectors: Callable[[list[str]], NDArray[np.float32]]) -> None:
        """Keep the vectors of ``ids`` (``vectors(part)`` gives a part's matrix), in
        transactions of :data:`PUT_BATCH`.

        Raises:
            TreeError: the database could not be written (nothing of that part was).
        """
        for start in range(0, len(ids), PUT_BATCH):
            part = list(ids[start : start + PUT_BATCH])
            ch = Changes()
            for node_id, vec in zip(part, vectors(part), strict=True):
                ch.set(_NS, node_id, np.ascontiguousarray(vec, dtype=np.float32).tobytes())
            try:
                self.rows.commit(ch)
            except (OSError, ModelStoreError) as exc:
                raise TreeError(
                    f"cannot checkpoint the build's vectors in {self.rows.path}: {exc}; check "
                    "free space and permissions of ADRAP_STATE_DIR, then run the build again "
                    "(it resumes from what was checkpointed)"
                ) from exc

    def get(self, ids: Iterable[str]) -> dict[str, NDArray[np.float32]]:
        """Return the kept vectors of those of ``ids`` that have one."""
        got = self.rows.get_many(_NS, ids)
        return {k: np.frombuffer(v, dtype=np.float32) for k, v in got.items()}
