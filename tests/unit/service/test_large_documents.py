"""A large file never holds up the small ones: the watcher applies it after the rest of its batch,
embeds its leaves a slice at a time outside the writer's lock, and lands what arrived meanwhile
between two slices (issue 57: a 200 KB file held every later file for over two minutes)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from ingestor.pipeline import Pipeline, UpdateReport
from ingestor.service.events import Change
from ingestor.service.large_docs import (
    EMBED_SLICE,
    LARGE_DOC_LEAVES,
    changed_since_read,
    large_groups,
)
from ingestor.service.watcher import Watcher
from ingestor.tree.invariants import violations
from ingestor.tree.state import TreeState
from testkit.corpus import doc_text, make_pipeline
from testkit.daemons import make_watcher
from testkit.fakes import CountingEmbedder

BIG = "big.txt"


class Arrivals(CountingEmbedder):
    """Records each call's size; on the call that embeds the ``at``-th text of the large file,
    runs ``then`` (a file arrives, or the daemon is told to stop)."""

    def __init__(self, inner: CountingEmbedder) -> None:
        super().__init__()
        self.texts = inner.texts
        self.calls: list[int] = []
        self.big: set[str] = set()
        self.seen_big = 0
        self.at = 1
        self.then: list[object] = []

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.calls.append(len(texts))
        before = self.seen_big
        self.seen_big += sum(t in self.big for t in texts)
        if before < self.at <= self.seen_big:
            for action in self.then:
                action()  # type: ignore[operator]
        return super().embed_documents(texts)


@pytest.fixture
def built(tmp_path: Path) -> Iterator[tuple[Pipeline, Path, Arrivals]]:
    root = tmp_path / "docs"
    root.mkdir()
    rng = random.Random(3)
    for i in range(6):
        (root / f"d{i}.txt").write_text(doc_text(rng, rng.randint(4, 8)))
    p = make_pipeline(tmp_path)
    p.build(root)
    emb = Arrivals(p.context.embedder)  # type: ignore[arg-type]
    p.context.embedder = emb
    yield p, root.resolve(), emb
    p.context.store.close()


def write_big(root: Path, p: Pipeline, emb: Arrivals, seed: int = 7) -> Path:
    path = root / BIG
    path.write_text(doc_text(random.Random(seed), 260))
    texts = p.new_leaf_texts(p.require_state(), _read(p, path))
    assert len(texts) > LARGE_DOC_LEAVES * 2, "the file is large"
    emb.big = set(texts)
    return path


def _read(p: Pipeline, path: Path):  # type: ignore[no-untyped-def]
    state = p.require_state()
    docs, _ = p.collect(state, [path], UpdateReport())
    return docs[0]


def watcher(p: Pipeline, root: Path, landed: list[set[str]]) -> Watcher:
    def on_applied(_report: UpdateReport, state: TreeState) -> None:
        landed.append(set(state.sources))

    return make_watcher(
        p, p.require_state(), root, debounce=0.01, close_grace=0.01, on_applied=on_applied
    )


def test_a_file_arriving_during_a_large_files_embedding_lands_first(
    built: tuple[Pipeline, Path, Arrivals],
) -> None:
    p, root, emb = built
    big = write_big(root, p, emb)
    small = root / "small.txt"
    landed: list[set[str]] = []
    w = watcher(p, root, landed)
    beside = root / "beside.txt"
    beside.write_text(doc_text(random.Random(5), 5))

    def arrive() -> None:  # while the large file's leaves are being embedded
        small.write_text(doc_text(random.Random(9), 5))
        w.paths.put(Change(small))

    emb.at, emb.then = LARGE_DOC_LEAVES, [arrive]
    assert w.apply({big, beside})

    first = next(i for i, s in enumerate(landed) if "beside.txt" in s)
    assert BIG not in landed[first], "the small file of the same batch landed before the large one"
    when = next(i for i, s in enumerate(landed) if "small.txt" in s)
    assert BIG not in landed[when], "a file arriving during its embedding landed before it"
    assert BIG in landed[-1]
    assert {"small.txt", "beside.txt"} <= landed[-1]
    state = p.require_state()
    assert violations(state) == []
    assert set(state.sources) == {q.name for q in root.iterdir()}
    # Its leaves were embedded once, a slice at a time, and the update took those vectors.
    assert sum(t in emb.big for t in emb.texts) == len(emb.big)
    big_calls = [n for n in emb.calls if n <= EMBED_SLICE]
    assert len(big_calls) >= len(emb.big) // EMBED_SLICE


def test_a_large_file_changed_during_its_embedding_is_read_again_not_applied_stale(
    built: tuple[Pipeline, Path, Arrivals],
) -> None:
    p, root, emb = built
    big = write_big(root, p, emb)
    landed: list[set[str]] = []
    w = watcher(p, root, landed)
    emb.at, emb.then = 1, [lambda: big.write_text("A different text now. " * 3)]
    assert w.apply({big})
    assert BIG not in p.require_state().sources, "the stale version was not applied"
    assert [c.path for c in list(w.paths.queue)] == [big], "it is queued to be read again"
    batch = w.next_batch()
    assert w.apply(batch)
    state = p.require_state()
    leaves = [state.nodes[i] for i in state.sources[BIG].node_ids]
    assert [n.text for n in leaves] == [
        "A different text now. A different text now. A different text now."
    ]


def test_stopping_during_a_large_files_embedding_records_nothing_for_it(
    built: tuple[Pipeline, Path, Arrivals],
) -> None:
    p, root, emb = built
    big = write_big(root, p, emb)
    landed: list[set[str]] = []
    w = watcher(p, root, landed)
    emb.at, emb.then = 1, [w._stopping.set]
    assert w.apply({big})
    assert sum(t in emb.big for t in emb.texts) <= EMBED_SLICE, "it stopped after one slice"
    assert BIG not in p.require_state().sources, "the next start reads it again"


def test_a_small_edit_of_a_large_file_is_applied_in_its_batch(
    built: tuple[Pipeline, Path, Arrivals],
) -> None:
    p, root, emb = built
    big = write_big(root, p, emb)
    w = watcher(p, root, [])
    assert w.apply({big})
    assert BIG in p.require_state().sources
    text = big.read_text()
    big.write_text(text.replace(text[:40], "An edited opening line. ", 1))
    texts = p.new_leaf_texts(p.require_state(), _read(p, big))
    assert 0 < len(texts) <= LARGE_DOC_LEAVES, "an edit changes a few leaves"
    landed: list[set[str]] = []
    w = watcher(p, root, landed)
    assert w.apply({big})
    assert len(landed) == 1, "one update, the batch's own"
    assert violations(p.require_state()) == []


def test_a_file_replaced_by_another_of_the_same_size_and_time_is_read_again(
    built: tuple[Pipeline, Path, Arrivals],
) -> None:
    """One rule for "changed since it was read" (the large file's check and the recheck after
    every batch): gone, resized, touched, or another file (inode) under the same name."""
    p, root, _ = built
    path = root / "d0.txt"
    doc = _read(p, path)
    assert not changed_since_read(doc, path)
    st = path.stat()
    other = root / "other.tmp"
    other.write_text(path.read_text()[::-1])  # same size, another file
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    other.replace(path)
    assert changed_since_read(doc, path)
    w = watcher(p, root, [])
    w._recheck([doc])
    assert [c.path for c in list(w.paths.queue)] == [path]
    path.unlink()
    assert changed_since_read(doc, path)


def test_large_files_of_one_batch_land_in_one_update_not_one_each(
    built: tuple[Pipeline, Path, Arrivals],
) -> None:
    """A folder of large files copied in at once: one update for them all (each update of a
    small tree past the drift threshold is a full rebuild, its summaries paid again: eight files
    made eight rebuilds), and a group bounded in leaves past that."""
    p, root, _ = built
    rng = random.Random(11)
    bigs = []
    for i in range(3):
        path = root / f"big{i}.txt"
        path.write_text(doc_text(rng, 120))
        bigs.append(path)
    landed: list[set[str]] = []
    w = watcher(p, root, landed)
    assert w.apply(set(bigs))
    names = {b.name for b in bigs}
    first = next(s for s in landed if s & names)
    assert names <= first, "the large files of one batch landed in several updates"
    assert violations(p.require_state()) == []
    sizes = [(None, ["x"] * n) for n in (40, 30, 50, 10, 90)]
    groups = [[len(t) for _, t in g] for g in large_groups(sizes, leaves=80)]  # type: ignore[arg-type]
    assert groups == [[40, 30], [50, 10], [90]]


def test_a_renamed_large_file_lands_in_one_update_with_its_vectors_reused(
    built: tuple[Pipeline, Path, Arrivals],
) -> None:
    """A rename is not a large document: its leaves' vectors come back from the old name's, so the
    old name's removal and the new name's leaves land together (before: the removal landed first,
    the file was missing from the tree until the new name's leaves were embedded again)."""
    p, root, emb = built
    big = write_big(root, p, emb)
    landed: list[set[str]] = []
    w = watcher(p, root, landed)
    assert w.apply({big})
    before, landed[:] = len(emb.texts), []
    moved = root / "moved.txt"
    big.rename(moved)
    assert w.apply({big, moved})
    assert [s for s in landed if BIG not in s and "moved.txt" not in s] == [], (
        "the file was missing from the tree between two updates"
    )
    assert len(landed) == 1
    assert not emb.big & set(emb.texts[before:]), "no leaf of the renamed file is embedded again"
    state = p.require_state()
    assert violations(state) == []
    assert set(state.sources) == {q.name for q in root.iterdir()}
