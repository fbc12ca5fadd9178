"""Rows of a layer's fitted local models: read from the state database, or, while a first build
fits them, written to its checkpoint as they come.

A layer's local models (one per global cluster: a UMAP that keeps a copy of its training rows,
and a GMM) pickle to ~1.8 KB a leaf (26.5k leaves: 48 MB for layer 0). A first build held them
all from their fit to its commit: with the leaves' matrix, the largest growth of its memory through
clustering. Nothing reads them again before the commit but the layer's construction
(:meth:`~ingestor.cluster.adaptive.AdaptiveLayer.from_fit`, each once, in order), so a first
build hands its clusterer a :class:`SpilledModels` list: each model is written to the checkpoint
database when it is fitted and read back from there when asked for, never kept. The commit copies
their bytes into the state database without unpickling them
(:func:`~ingestor.tree.layer_store.layer_changes`), and the layer then reads its models from
there, as a layer opened from disk does.
"""

from __future__ import annotations

from typing import Any

from ingestor.errors import TreeError
from ingestor.tree.row_containers import RowList
from ingestor.tree.rowmap import MISSING, Clock, RowMap, dumps, loads_model
from models_store import Changes, ModelStoreError, RowStore

__all__ = ["ModelRows", "SpilledModels", "relink_local", "spilled_models"]

#: Namespace prefix of the local models a first build has fitted and not committed yet:
#: ``fit<i>.local``, which the commit's renaming of a layer's parts makes ``L<i>.local``.
SPILL_PREFIX = "fit"


def relink_local(model: Any) -> None:
    """Point a local model read from disk back at its UMAP's training rows (its search index
    pickles without them)."""
    umap = getattr(model, "umap", None)
    if umap is not None and hasattr(umap, "_knn_search_index"):
        umap._knn_search_index.data = umap._raw_data


class ModelRows(RowMap[Any]):
    """The local models of a layer: a row the installed libraries cannot read raises
    ``IncompatibleModelError`` naming it. A model is replaced whole when refitted, never changed
    in place for the state (its objects keep caches as they work: the check of edits skips it)."""

    checked = False

    def _decode(self, key: str, data: bytes) -> Any:
        return loads_model(data, f"the local model {self.ns}/{key}")


class SpilledModels(ModelRows):
    """Local models kept in a checkpoint database, none in memory.

    A model set is written at once (a transaction of its own) and marked for the commit; a model
    read is decoded from the checkpoint each time. The commit writes the stored bytes under this
    map's (then renamed) namespace, and :meth:`committed_rows` hands over to the state database.

    Args:
        ns: the checkpoint namespace, ``fit<i>.local``.
        rows: the checkpoint database (open until the commit).
        clock: the clock of the tree's state (handed to the rows read after the commit).
    """

    def __init__(self, ns: str, rows: RowStore, clock: Clock) -> None:
        super().__init__(ns, clock)
        self.bind(rows)
        self.source = (rows, ns)
        #: The state database the commit writes these rows to (set by ``layer_changes``).
        self.target: RowStore | None = None
        self._written: set[str] = set()  # the models of this build, all pending
        self._clear_first = False

    def __setitem__(self, key: str, value: Any) -> None:
        rows, ns = self.source
        ch = Changes()
        ch.set(ns, key, dumps(value))
        try:
            rows.commit(ch)
        except (OSError, ModelStoreError) as exc:
            raise TreeError(
                f"cannot write the fitted local model {key} of {ns} to {rows.path}: {exc}; check "
                "free space and permissions of ADRAP_STATE_DIR, then run the build again"
            ) from exc
        self._written.add(key)

    def _fetch(self, key: str) -> object:
        rows, ns = self.source
        data = rows.get(ns, key) if key in self._written else None
        if data is None:  # not fitted by this build (a killed one's row may be there)
            return MISSING
        model = self._decode(key, data)
        relink_local(model)  # read anew each time: RowList links only the first
        return model

    def replace_all(self) -> None:
        """Mark every model for the commit (all are pending already): nothing is loaded."""
        self._clear_first = True

    def changes(self, out: Changes) -> None:
        """Add the models' stored bytes to ``out``, one row at a time (``out`` may spill)."""
        if self._clear_first:
            out.clear.update(self.namespaces())
        rows, ns = self.source
        for key in sorted(self._written, key=int):
            data = rows.get(ns, key)
            if data is None:
                raise TreeError(f"the local model {key} of {ns} is missing from {rows.path}")
            out.set(self.ns, key, data)

    def committed(self) -> None:
        super().committed()
        self._clear_first = False

    def held(self) -> int:
        return 0

    def committed_rows(self) -> ModelRows:
        """The same models, read from the state database they were committed to."""
        if self.target is None:
            raise RuntimeError(f"{self.ns}: committed without a target database")
        rows = ModelRows(self.ns, self.clock)
        rows.bind(self.target)
        return rows


def spilled_models(rows: RowStore, layer: int, clock: Clock) -> RowList[Any]:
    """An empty list whose items (layer ``layer``'s local models) go to ``rows`` as appended
    (``clock``: the tree's state's)."""
    models = SpilledModels(f"{SPILL_PREFIX}{layer}.local", rows, clock)
    return RowList(models, 0, on_load=relink_local)
