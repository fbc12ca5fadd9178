"""A tree's embedding model changed: the store built beside the live one, and the switch.

A model change (``ingestor.tree.model_change``) writes every node again, with the new model's
vectors, into a store *beside* the live one, while queries keep reading the live one; when every
point is in, it switches in one step. This module is the store side of that:

* :class:`EdgeNext`, the embedded store: the new shard is built in ``<store>.next`` beside the
  store's folder; the switch closes the live shard, renames the folders
  (:func:`~retriever.edge_shard.swap_folders`) and opens the new one in the same store object,
  under the daemon's store lock, so a query runs either before or after it.
* :class:`QdrantNext`, a Qdrant server: the new vectors go to the next physical generation of the
  collection's alias (``<name>_v<N+1>``); the switch is the alias switch (atomic on the server),
  then the old generation is dropped.
* :class:`FollowingEmbedder`, the query embedder of a daemon during the change: it embeds with
  the old model until the switch, then with the new one, as the meta point says.

Every method is idempotent, so a change killed at any point is resumed by calling them again.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from retriever.errors import EmbeddingError, StoreError
from retriever.protocols import Embedder, NodeStore

if TYPE_CHECKING:
    from retriever.edge_store import EdgeNodeStore
    from retriever.qdrant_store import QdrantNodeStore

__all__ = ["EdgeNext", "FollowingEmbedder", "NextStore", "QdrantNext", "next_store_for", "unlocked"]

log = logging.getLogger(__name__)

#: The folder of the embedded store a model change builds, beside the store's (``qdrant.next``).
NEXT_SUFFIX = ".next"


class NextStore(Protocol):
    """The store a model change builds beside the live one, and its switch."""

    #: Where it is, for messages (a folder or a collection).
    where: str

    def open(self, dim: int, embed_model: str) -> NodeStore:
        """Return the next store for ``embed_model`` (created, or the one a killed change left)."""
        ...

    def exists(self) -> bool:
        """Return whether a next store is there (a change under way, or left by one)."""
        ...

    def switch(self) -> None:
        """Make the next store the live one in one step (idempotent: done twice, once)."""
        ...

    def drop(self) -> None:
        """Delete the next store (an abandoned change); nothing if there is none."""
        ...


def unlocked(store: Any) -> tuple[Any, AbstractContextManager[None]]:
    """Return the store under a daemon's lock wrapper (its ``inner``) and that lock held for a
    block (the store itself and no lock when it is not wrapped)."""
    inner = getattr(store, "inner", None)
    if inner is None:
        return store, nullcontext()
    held: AbstractContextManager[None] = store.held()
    return inner, held


def next_store_for(live: Any, tree: str) -> NextStore:
    """Return the next store of ``live`` (an embedded shard or a server's collection, possibly
    behind the daemon's lock).

    Raises:
        StoreError: a store of another kind (it cannot change its model in place).
    """
    inner, _ = unlocked(live)
    from retriever.edge_store import EdgeNodeStore

    if isinstance(inner, EdgeNodeStore):
        return EdgeNext(live)
    from retriever.qdrant_store import QdrantNodeStore

    if isinstance(inner, QdrantNodeStore):
        return QdrantNext(live, tree)
    raise StoreError(
        f"a {type(inner).__name__} cannot change its embedding model in place; rebuild the tree "
        "into a fresh state dir"
    )


class EdgeNext:
    """The embedded store's next shard, in ``<store folder>.next``."""

    def __init__(self, live: Any) -> None:
        self.live = live
        inner, _ = unlocked(live)
        self.store: EdgeNodeStore = inner
        self.path = inner.path.with_name(inner.path.name + NEXT_SUFFIX)
        self.where = str(self.path)
        self._opened: EdgeNodeStore | None = None

    def open(self, dim: int, embed_model: str) -> NodeStore:
        from retriever.edge_store import EdgeNodeStore

        if self._opened is None:
            # Bulk writes: no index build per batch; the change optimizes once, at its end.
            opened = EdgeNodeStore(
                self.path,
                auto_optimize_points=None,
                planner=self.store.planner,
                hnsw=self.store.hnsw,
                reserve=self.store.reserve,
            )
            try:
                opened.ensure_collection(dim, embed_model)
            except BaseException:
                opened.close()
                raise
            self._opened = opened
        return self._opened

    def exists(self) -> bool:
        return self.path.is_dir() and any(self.path.iterdir())

    def switch(self) -> None:
        self._close()
        inner, held = unlocked(self.live)
        with (
            held
        ):  # no query runs on a closed shard: it waits for the switch, then reads the new one
            inner.take_over(self.path)

    def drop(self) -> None:
        self._close()
        if self.path.exists():
            shutil.rmtree(self.path)
            log.info("deleted the unfinished embedded store %s", self.path)

    def _close(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            opened.close()


class QdrantNext:
    """A server collection's next generation behind its alias (``<name>_v<N+1>``).

    Raises (from :meth:`open`):
        StoreError: the collection holds other trees' points too: a model change of one tree
            would take theirs away (the meta point names one model for the collection).
    """

    def __init__(self, live: Any, tree: str) -> None:
        self.live = live
        self.tree = tree
        inner, _ = unlocked(live)
        self.store: QdrantNodeStore = inner
        self.where = f"the next generation of {self.store.where()}"
        self._opened: QdrantNodeStore | None = None
        self._target: tuple[int, str] | None = None

    def open(self, dim: int, embed_model: str) -> NodeStore:
        if self._opened is not None:
            return self._opened
        self._check_alone()
        pending = self.store.pending_generation()
        opened = None
        if pending is not None:
            try:
                opened = self.store.generation(pending, dim, embed_model)
            except StoreError:
                raise
            except Exception as exc:  # another model's generation: start afresh
                log.info("dropping generation %s (%s)", pending, exc)
                self.store.drop_generation(pending)
        if opened is None:
            opened = self.store.create_next_generation(dim, embed_model)
        self._opened, self._target = opened, (dim, embed_model)
        return opened

    def _check_alone(self) -> None:
        others = _other_points(self.store, self.tree)
        if others:
            raise StoreError(
                f"{self.store.where()} holds {others} points of other trees than {self.tree!r}: "
                "its meta point names one embedding model for all of them, so one tree cannot "
                "change its model there; give the tree a collection of its own "
                "(ADRAP_QDRANT__COLLECTION) and rebuild it, or change every tree's model together"
            )

    def exists(self) -> bool:
        return self.store.pending_generation() is not None

    def switch(self) -> None:
        pending = self._opened
        if pending is None:
            if self.store.pending_generation() is None:
                return  # switched already
            raise StoreError(
                f"cannot switch {self.store.where()}: open() its next generation first"
            )
        inner, held = unlocked(self.live)
        with held:
            pending.promote()
            if self._target is not None:  # the live store reads its new generation from now on
                inner.ensure_collection(*self._target)
        self._opened = None

    def drop(self) -> None:
        self._opened = None
        name = self.store.pending_generation()
        if name is not None:
            self.store.drop_generation(name)
            log.info("deleted the unfinished collection %s", name)


def _other_points(store: QdrantNodeStore, tree: str) -> int:
    """The points of the collection that belong to neither ``tree`` nor the meta point."""
    from qdrant_client import models

    from retriever.schema import META_TREE, F

    with store.call("count the other trees' points"):
        return int(
            store.client.count(
                store.collection,
                count_filter=models.Filter(
                    must_not=[
                        models.FieldCondition(
                            key=F.TREE, match=models.MatchAny(any=[tree, META_TREE])
                        )
                    ]
                ),
                exact=True,
            ).count
        )


class FollowingEmbedder:
    """The query embedder of a store whose embedding model is changing: ``old`` (the model the
    live store holds) until :meth:`switch`, then ``new``. ``old`` may be None (it could not be
    loaded): questions are then refused, with the reason, until the switch."""

    def __init__(self, old: Embedder | None, new: Embedder, old_model: str) -> None:
        self.old = old
        self.new = new
        self.old_model = old_model
        self.switched = False
        now = new if old is None else old
        self.model_id: str = now.model_id
        self.dim: int = now.dim

    def switch(self) -> None:
        """Embed with the new model from now on (the store switched)."""
        self.switched = True
        self.model_id, self.dim = self.new.model_id, self.new.dim

    @property
    def current(self) -> Embedder:
        if self.switched:
            return self.new
        if self.old is None:
            raise EmbeddingError(
                f"the tree is changing its embedding model from {self.old_model!r} to "
                f"{self.new.model_id!r} and the old model cannot be loaded to embed questions "
                "meanwhile; ask again once the change is done (the daemon logs it)"
            )
        return self.old

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return self.current.embed_documents(texts)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.current.embed_query(text)
