"""A chain of folders thousands deep (``mkdir -p``, any user of a share can make one) neither stops
the listing nor costs the writer the square of its depth: folders more than ``MAX_DEPTH`` below the
root are skipped, saying why (before: the walk ran out of Python's stack at ~490 levels, so every
build and every rescan of the share failed), and a batch of a chain's folder events lists the chain
once (before: once per folder, the file at its bottom read once per folder above it, 30 s of the
writer at depth 400)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingestor.pipeline import Pipeline, UpdateReport
from ingestor.pipeline.collect import Collector, outermost
from ingestor.read.listing import MAX_DEPTH, iter_files, listed_path
from testkit.corpus import make_pipeline

TEXT = "A note about tram lines in Warsaw and the budgets of the city council. " * 8


@pytest.fixture(autouse=True)
def _unchain(tmp_path: Path) -> Iterator[None]:
    """Remove the test's folders without recursion (pytest's cleanup, shutil.rmtree, recurses
    once per level and runs out of stack on a chain)."""
    yield
    folders, todo = [], [tmp_path]
    while todo:
        folder = todo.pop()
        folders.append(folder)
        with os.scandir(folder) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                else:
                    os.unlink(entry.path)
    for folder in reversed(folders[1:]):
        os.rmdir(folder)


def chain(root: Path, depth: int, at: tuple[int, ...] = ()) -> list[Path]:
    """``root/d/d/...`` ``depth`` folders deep (made through descriptors: no path is too long),
    a file ``n.md`` in the folder at each depth of ``at``; return the folders' paths."""
    folders, cur = [], root
    fd = os.open(root, os.O_RDONLY)
    try:
        for level in range(1, depth + 1):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd, cur = sub, cur / "d"
            folders.append(cur)
            if level in at:
                out = os.open(f"{level}.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
                os.write(out, TEXT.encode())
                os.close(out)
    finally:
        os.close(fd)
    return folders


def test_a_chain_deeper_than_the_stack_is_listed_to_the_limit_and_its_rest_refused(
    tmp_path: Path,
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "top.md").write_text(TEXT)
    chain(root, 600, at=(MAX_DEPTH, MAX_DEPTH + 1, 600))
    listed = list(iter_files(root))
    files = [p for p, e in listed if e is None]
    refused = [(p, e) for p, e in listed if e is not None]
    assert [p.name for p in files] == [f"{MAX_DEPTH}.md", "top.md"]
    ((path, error),) = refused
    assert len(path.relative_to(root).parts) == MAX_DEPTH + 1
    assert f"more than {MAX_DEPTH} folders below the root" in str(error)
    assert not listed_path(root, path / f"{MAX_DEPTH + 1}.md")
    assert listed_path(root, files[0])


def test_a_build_over_a_share_with_a_deep_chain_indexes_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "top.md").write_text(TEXT)
    chain(root, 600, at=(3, 600))  # the walk ran out of stack at ~490
    p = make_pipeline(tmp_path)
    try:
        p.build(root)
        state = p.require_state()
        assert sorted(state.sources) == ["d/d/d/3.md", "top.md"]
        skipped = p.collector.unread.page("skipped")
        assert any("folders below the root" in row["reason"] for row in skipped), skipped
    finally:
        p.context.store.close()


def test_a_batch_of_a_chains_folders_reads_the_file_at_its_bottom_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "top.md").write_text(TEXT)
    p: Pipeline = make_pipeline(tmp_path)
    try:
        p.build(root)
        folders = chain(root.resolve(), 40, at=(40,))
        reads: list[Path] = []
        real = Collector._want

        def counted(self: Collector, root_, path, *rest):  # type: ignore[no-untyped-def]
            reads.append(path)
            return real(self, root_, path, *rest)

        monkeypatch.setattr(Collector, "_want", counted)
        bottom = folders[-1] / "40.md"
        batch = [*reversed(folders), bottom]  # as events arrive: any order, every folder
        docs, gone = p.collect(p.require_state(), batch, UpdateReport())
        assert [d.source for d in docs] == ["d/" * 40 + "40.md"]
        assert gone == []
        assert reads == [bottom]
    finally:
        p.context.store.close()


def test_outermost_keeps_each_path_not_under_another_in_its_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    given = [a / "x" / "f.md", b, a / "x", tmp_path / "ab", a / "x", b / "y.md", tmp_path / "a.md"]
    assert outermost(given) == [b, a / "x", tmp_path / "ab", tmp_path / "a.md"]
    assert outermost([tmp_path, a, b / "c"]) == [tmp_path]
