"""A tree's state in its state database: open it, refuse an incompatible one, commit what changed.

Layout: ``<state_dir>/models/tree-<tree>.sqlite`` (see :mod:`models_store.rows`), namespaces
``node`` (one row per node), ``source`` (the source index), ``cache`` (the summary cache, bounded,
least recently used evicted), ``L<i>.*`` (each clustered layer by parts, see
:mod:`ingestor.tree.layer_store`) and ``intent`` (the points an update is about to write and delete, so a
crash between the store and the state is repaired from a few rows, not from a scan of the tree).
The manifest holds the tree's scalars (root, embedding model, counters, nodes per layer).

An update commits in three short transactions: the intent (before touching Qdrant), the state
with the intent marked committed (after the upserts), and the intent's removal (after the deletes).

A build checkpoints the summaries it pays for as it goes (:func:`checkpoint_cache`), so a build
killed half-way does not pay for them again: into the ``cache`` namespace of the tree's state
database when there is one (the cache is content-addressed and no reader reads it, so rows added
there change nothing a reader sees), else into ``checkpoint-<tree>.sqlite`` beside it, a database
that no reader opens (``cache`` rows, and the nodes' vectors: :mod:`ingestor.pipeline.checkpoint`);
the build's first commit imports the summaries and, once its points are written,
:func:`drop_checkpoint` deletes it. Its existence never makes a tree look built.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestor.errors import TreeError
from ingestor.tree import changelog
from ingestor.tree.layer_store import (
    held_by_layer,
    layer_changes,
    layer_committed,
    open_layer,
    remove_layer,
    shed_layer,
)
from ingestor.tree.rowmap import RowMap, dumps, loads
from ingestor.tree.state import READABLE_STATE_FORMATS, STATE_FORMAT, TreeState
from models_store import Changes, IncompatibleModelError, ModelStore, ModelStoreError, RowStore
from retriever import SCHEMA_VERSION, Embedder
from retriever.schema import model_setting

log = logging.getLogger(__name__)

#: Past its bound, a held state keeps the rows the last this many updates used (see shed_rows).
RECENT_UPDATES = 8
#: Rows, and bytes, a fresh state's commit gathers before writing them (``RowStore.commit``'s
#: ``fill``): ~4 MB of pickled nodes held at a time instead of the whole tree, and at most
#: ~32 MB of a layer's fitted models (a local model pickles its training rows: all of a
#: layer's together are about the size of its vectors, 1.5 GB at 1M leaves).
SPILL_ROWS = 2048
SPILL_BYTES = 32 << 20
#: The summary cache keeps at least this many entries, and at least CACHE_FACTOR x the summaries.
CACHE_MIN = 2000
CACHE_FACTOR = 3
#: Past its bound the cache is cut 1/CACHE_SLACK below it, so the next cut (and the count that
#: finds it due) waits for that many new summaries instead of coming at every commit.
CACHE_SLACK = 10
_INTENT = "intent"
#: The intent row of a first build committed before its points were written (see fill_pending).
_UNSTORED = "unstored"
#: Namespaces whose rows carry the generation that last wrote or read them: the summary cache,
#: evicted least recently used first. Other rows are stamped 0 (RowStore.commit: cheaper writes).
_STAMPED = frozenset({"cache"})
#: The scalars of a TreeState, kept in the manifest (the tree's name is ``tree_name`` there).
_SCALARS = (
    "root",
    "embed_model",
    "dim",
    "params",
    "generation",
    "leaves_at_build",
    "added_since_build",
    "removed_since_build",
    "built_at",
)


def state_name(tree: str) -> str:
    """Return the name of a tree's state in the models folder."""
    return f"tree-{tree}"


def state_path(models: ModelStore, tree: str) -> Path:
    """Return the state database file of ``tree``."""
    return state_file(models.root, tree)


def state_file(models_root: Path, tree: str) -> Path:
    """Return the state database file of ``tree`` in the models folder ``models_root`` (without
    opening a ``ModelStore``, which creates its folder: for read-only commands)."""
    return models_root / f"{state_name(tree)}.sqlite"


def state_exists(models: ModelStore, tree: str) -> bool:
    """Return whether ``tree`` has a committed state (without creating anything)."""
    return state_path(models, tree).exists() or models.exists(state_name(tree))


def checkpoint_path(models: ModelStore, tree: str) -> Path:
    """Return the summary checkpoint of a first build of ``tree`` (no ``tree-`` prefix: never a state)."""
    return models.root / f"checkpoint-{tree}.sqlite"


def open_checkpoint(models: ModelStore, state: TreeState) -> RowStore:
    """Back the summary cache of a first build of ``state`` by its checkpoint database.

    Summaries a killed build paid for are found there by the next build (``summarize_groups``
    looks them up in the cache); those of the new build are written there by
    :func:`checkpoint_cache`. Returns the database, which the caller closes.

    Raises:
        models_store.ModelStoreError: the checkpoint cannot be created or read.
    """
    rows = RowStore(checkpoint_path(models, state.tree), create=True)
    state.summary_cache.bind(rows)
    found = rows.count("cache")
    if found:
        log.info("a previous build of tree %r left %d summaries: reusing them", state.tree, found)
    return rows


def checkpoint_cache(state: TreeState, rows: RowStore) -> int:
    """Write the summaries set in ``state``'s cache since the last write into ``rows``, now.

    ``rows`` is the database the cache is bound to: the committed state's (a rebuild) or the
    checkpoint's (a first build). Only ``cache`` rows are written, stamped with the generation the
    build will commit as, in one transaction; the tree's other rows and manifest are untouched,
    so readers still see the previous tree (or none). Returns the bytes written.

    Raises:
        models_store.ModelStoreError: the database could not be written (nothing was).
    """
    ch = Changes()
    state.summary_cache.changes(ch)
    if not ch:
        return 0
    written = rows.commit(ch, stamp=state.generation + 1, stamped=_STAMPED)
    state.summary_cache.committed()
    return written


def drop_checkpoint(models: ModelStore, tree: str) -> bool:
    """Delete the summary checkpoint of ``tree`` (after a commit imported it); return if one was."""
    path = checkpoint_path(models, tree)
    found = path.exists()
    for extra in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    return found


def load_state(
    models: ModelStore,
    tree: str,
    embedder: Embedder | None = None,
    *,
    readonly: bool = False,
    layers: bool = True,
) -> TreeState | None:
    """Open the committed state of ``tree`` (rows load lazily), or None if it was never built.

    Args:
        embedder: when given, a state written for another embedding model or dimension is refused.
        readonly: open without write access (``status``): creates and changes nothing.
        layers: open the layers' fitted models; False (``status``: counts only) leaves
            ``state.layers`` empty and imports neither UMAP nor scikit-learn.

    Raises:
        models_store.IncompatibleModelError: another embedding model, format or library versions.
    """
    path = state_path(models, tree)
    if not path.exists():
        if models.exists(state_name(tree)):
            return _migrate(models, tree, embedder, readonly=readonly)
        return None
    rows = RowStore.shared(path, readonly=readonly)
    expect: dict[str, Any] = {}
    if rows.manifest().get("format", STATE_FORMAT) not in READABLE_STATE_FORMATS:
        expect["format"] = STATE_FORMAT  # refused by check, which says how to rebuild
    if embedder is not None:
        _check_model(rows, embedder)
    rows.check(expect)
    return _open(rows, layers=layers)


def _check_model(rows: RowStore, embedder: Embedder) -> None:
    """Refuse a state written for another embedding model or dimension, saying how the tree
    changes model (a writer does it: :mod:`ingestor.tree.model_change`).

    Raises:
        models_store.IncompatibleModelError: another model or dimension.
    """
    m = rows.manifest()
    have, dim = m.get("embed_model"), m.get("dim")
    if have is None or (have, dim) == (embedder.model_id, embedder.dim):
        return
    raise IncompatibleModelError(
        f"the tree state in {rows.path} was written with embedding model {have!r} ({dim}-d) "
        f"but the embedder is {embedder.model_id!r} ({embedder.dim}-d); restore the previous "
        f"setting ({model_setting(str(have))}), or change the tree's model: run `adrap "
        "watch` or any writing command (`adrap add`, `adrap refresh`) with the new setting. It "
        "embeds every node's text again with the new model beside the live store, keeps every "
        "summary (no summary is paid again) and switches when done; queries use the old model "
        "until then"
    )


def _row_maps(state: TreeState) -> tuple[RowMap[Any], ...]:
    """The state's own row-backed mappings (each layer keeps its own, see layer_store)."""
    return (state.nodes, state.sources, state.summary_cache, state.stale)


def _open(rows: RowStore, *, layers: bool = True) -> TreeState:
    m = rows.manifest()
    if "tree_name" not in m:  # created, nothing committed yet (a first build under way)
        raise ModelStoreError(
            f"the state database {rows.path} has no committed tree yet: a first build is under "
            "way; run the command again when it is done"
        )
    state = TreeState(tree=m["tree_name"], **{k: m[k] for k in _SCALARS})
    for rowmap in _row_maps(state):
        rowmap.bind(rows)
    state.nodes.sizes = {int(k): int(v) for k, v in (m.get("layer_sizes") or {}).items()}
    n_layers = int(m.get("n_layers", 0)) if layers else 0
    state.layers = [open_layer(rows, i, state.clock) for i in range(n_layers)]
    state.rows = rows
    # A state from before this entry: its models were written with the last writer's libraries.
    state.model_libraries = dict(m.get("model_libraries") or m.get("libraries") or {})
    return state


def _migrate(
    models: ModelStore, tree: str, embedder: Embedder | None, *, readonly: bool
) -> TreeState | None:
    """Open a state pickled by adrap 0.1 (one file per commit) and, for writers, convert it."""
    expect = {} if embedder is None else {"embed_model": embedder.model_id, "dim": embedder.dim}
    old = models.load(state_name(tree), expect=expect)
    if not hasattr(old, "nodes"):
        raise TreeError(f"{models.root / state_name(tree)} does not hold a tree state; rebuild")
    state = TreeState(tree=old.tree, **{k: getattr(old, k) for k in _SCALARS})
    for node_id, node in old.nodes.items():
        state.nodes[node_id] = node
    for node_id, vec in old.vectors.items():
        state.vectors[node_id] = vec
    for source, entry in old.sources.items():
        state.sources[source] = entry
    for key, text in old.summary_cache.items():
        state.summary_cache[key] = text
    state.layers = list(old.layers)
    if not readonly:
        commit_state(models, state)
        models.delete(state_name(tree))
        log.info("converted the state of tree %r to %s", tree, state_path(models, tree))
    return state


@dataclass
class Intent:
    """Points an interrupted update was writing (``upsert``) and deleting (``delete``)."""

    committed: bool
    upsert: list[str]
    delete: list[str]


def begin_intent(
    state: TreeState, upsert: list[str], delete: list[str], *, also: Changes | None = None
) -> None:
    """Record, before touching the node store, which points this update writes and deletes
    (with the rows of ``also``, in the same transaction)."""
    if state.rows is None:
        return
    ch = also if also is not None else Changes()
    ch.set(_INTENT, "upsert", dumps(sorted(upsert)))
    ch.set(_INTENT, "delete", dumps(sorted(delete)))
    ch.set(_INTENT, "committed", dumps(False))
    state.rows.commit(ch, stamp=state.generation, stamped=_STAMPED)
    state.intent_open = True


def end_intent(state: TreeState) -> None:
    """Forget the intent once its deletes are done."""
    if state.rows is None:
        return
    ch = Changes()
    for key in ("upsert", "delete", "committed"):
        ch.remove(_INTENT, key)
    state.rows.commit(ch, stamp=state.generation, stamped=_STAMPED)
    state.intent_open = False


def pending_intent(state: TreeState) -> Intent | None:
    """Return the intent an interrupted update left behind, or None."""
    if state.rows is None:
        return None
    got = state.rows.get_many(_INTENT, ["upsert", "delete", "committed"])
    if "upsert" not in got:
        return None
    return Intent(
        committed=bool(loads(got.get("committed", dumps(False)))),
        upsert=list(loads(got["upsert"])) if "upsert" in got else [],  # type: ignore[call-overload]
        delete=list(loads(got["delete"])) if "delete" in got else [],  # type: ignore[call-overload]
    )


def fill_pending(state: TreeState) -> bool:
    """Whether ``state`` is a first build committed before its points were all written (the
    build writes them once its tree is let go, recovery if it was killed meanwhile)."""
    return state.rows is not None and state.rows.get(_INTENT, _UNSTORED) is not None


def end_fill(state: TreeState) -> None:
    """Record that every point of the committed state is written (see :func:`fill_pending`)."""
    if state.rows is None:
        raise ValueError(f"tree {state.tree!r} was never committed: nothing to mark as filled")
    ch = Changes()
    ch.remove(_INTENT, _UNSTORED)
    state.rows.commit(ch, stamp=state.generation, stamped=_STAMPED)


def commit_state(
    models: ModelStore, state: TreeState, *, unstored: bool = False, also: Changes | None = None
) -> int:
    """Write what changed in ``state`` as its next generation, in one transaction.

    A state that was never committed (a fresh build) is written whole, replacing any previous
    state of the tree; ``unstored``: its points are written after (see :func:`fill_pending`).
    ``also``: rows of other namespaces written (cleared, deleted) in the same transaction (a
    model change's switch: :mod:`ingestor.tree.model_change`). Returns the bytes written.

    Raises:
        models_store.ModelStoreError: the database could not be written (nothing was).
    """
    if state.rows is None:
        path = state_path(models, state.tree)
        state.rows = RowStore.shared(path, create=True)
        for rowmap in _row_maps(state):
            rowmap.replace_all()
        fresh = True
    else:
        fresh = False
    rows: RowStore = state.rows
    before = int(rows.manifest().get("n_layers", 0))
    state.generation += 1

    def gather(ch: Changes) -> None:
        for rowmap in _row_maps(state):
            rowmap.changes(ch)
        for i, layer in enumerate(state.layers):  # a new or moved layer clears its rows first
            layer_changes(layer, i, ch, rows, state.clock)
        for i in range(len(state.layers), before):
            remove_layer(i, ch)
        if fresh:
            ch.clear.add(_INTENT)
            if unstored:
                ch.set(_INTENT, _UNSTORED, dumps(True))
        elif state.intent_open:
            ch.set(_INTENT, "committed", dumps(True))
        changelog.gather(state.journal, state.generation, ch, None if fresh else rows)
        if also is not None:
            ch.clear |= also.clear
            for (ns, key), value in also.put.items():
                ch.set(ns, key, value)
            for ns, key in also.delete:
                ch.remove(ns, key)
        ch.manifest = {
            "format": STATE_FORMAT,
            "schema": SCHEMA_VERSION,
            "tree_name": state.tree,
            **{k: getattr(state, k) for k in _SCALARS},
            "layer_sizes": {str(k): v for k, v in state.nodes.sizes.items()},
            "n_layers": len(state.layers),
            "model_libraries": state.model_libraries,
        }

    ch = Changes()
    try:
        if fresh:  # the whole tree, from memory: written a part at a time as it is gathered
            ch.spill_rows, ch.spill_bytes = SPILL_ROWS, SPILL_BYTES
            written = rows.commit(ch, stamp=state.generation, stamped=_STAMPED, fill=gather)
        else:  # an update: gathered first (moved layers read their old rows before any write)
            gather(ch)
            written = rows.commit(ch, stamp=state.generation, stamped=_STAMPED)
    except BaseException:
        state.generation -= 1
        raise
    finally:
        state.journal.clear()  # written with its changes, or dropped with them
    for rowmap in _row_maps(state):
        rowmap.committed()
    for layer in state.layers:
        layer_committed(layer)
    summaries = sum(n for layer, n in state.nodes.sizes.items() if layer > 0)
    keep = max(CACHE_MIN, CACHE_FACTOR * summaries)
    if rows.evict_oldest("cache", keep, down_to=keep - keep // CACHE_SLACK) or fresh:
        state.summary_cache.bind(rows)  # memory holds no more than the database
    state.last_commit_bytes = written
    return written


def held_rows(state: TreeState) -> int:
    """Return how many of the state's rows (and node vectors) this process holds in memory."""
    held = sum(m.held() for m in _row_maps(state)) + len(state.vectors)
    return held + sum(held_by_layer(layer) for layer in state.layers)


def shed_rows(state: TreeState, limit: int) -> int:
    """Once more than ``limit`` rows are held in memory, drop those the last
    :data:`RECENT_UPDATES` updates did not use (then those the last one did not use, then all,
    until at most ``limit`` are left); return how many were dropped. Call it after every update:
    each call ends one (``state.clock``, the clock of use of this state's rows alone, advances).

    A state held across updates (the daemon's) keeps every row it reads, and the rows an update
    reads are a few clusters of a few groups anywhere in the tree: held, they add up to the
    whole database (265k synthetic leaves: +360 MiB of RSS over 300 updates, still rising; with
    the daemon's 20,000 rows, flat at ~1.5 GiB). Recent updates' rows are mostly those the next
    ones use again (the upper layers' few groups). The price: rows dropped are read again when
    an update needs them (at 265k leaves ~10-20 ms CPU more per update than holding everything,
    as a held state's hits grow with what it holds). Only a committed state is shed (nothing
    pending, no open intent), between updates: the database holds those rows as they are.
    """
    now = state.clock.tick()
    if state.rows is None or state.intent_open or held_rows(state) <= limit:
        return 0
    dropped = 0
    for since in (now - RECENT_UPDATES + 1, now, None):  # then the last update's, then all
        dropped += _shed(state, state.rows, used_since=since)
        if held_rows(state) <= limit:
            break
    log.debug("dropped %d rows of tree %r held in memory (limit %d)", dropped, state.tree, limit)
    return dropped


def _shed(state: TreeState, rows: RowStore, *, used_since: int | None) -> int:
    dropped = sum(m.shed(used_since=used_since) for m in _row_maps(state))
    dropped += state.vectors.shed(used_since=used_since)
    return dropped + sum(shed_layer(la, rows, used_since=used_since) for la in state.layers)
