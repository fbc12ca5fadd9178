"""A full disk under the embedded store: refused with the reason, never a killed process.

qdrant-edge writes memory-mapped files; a write into one on a full disk (and, on a filesystem in
memory, even opening the store: the engine reads its files in) ends the process with SIGBUS and
no message. A daemon restarted by its supervisor died again at its first write, and a reader on
a full tmpfs died opening the store. The store now checks the free space first
(``retriever.room``): writes keep ``reserve`` bytes free, an index build is skipped, an open that
would fill a memory filesystem is refused.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from retriever import StoreFullError
from retriever.edge_store import EdgeNodeStore
from retriever.room import MIB, filesystem_type, free_bytes, room_problem
from testkit.corpus import make_pipeline
from tests.unit.service.test_watcher import write_corpus

HUGE = 1 << 50  # more than any disk has


def _build(tmp: Path) -> list[str]:
    """Build a small tree with its store in ``tmp/state/qdrant``; return its node ids."""
    root = tmp / "docs"
    write_corpus(root, 4)
    p = make_pipeline(tmp)
    p.build(root)
    ids = list(p.require_state().nodes)
    p.context.store.close()
    return ids


def _built(tmp: Path) -> tuple[EdgeNodeStore, list[str]]:
    """A small tree's store (reopened without the daemon's lock) and its node ids."""
    ids = _build(tmp)
    return EdgeNodeStore(tmp / "state" / "qdrant"), ids


def test_writes_are_refused_before_the_engine_when_the_disk_lacks_the_reserve(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, ids = _built(tmp_path)
    try:
        nodes = store.retrieve(ids[:3])
        vectors = store.retrieve_vectors(ids[:3])
        store.reserve = free_bytes(tmp_path) + HUGE
        with pytest.raises(StoreFullError, match="not enough free disk space to write 3 points"):
            store.upsert(nodes, vectors)
        with pytest.raises(StoreFullError, match="MiB free on the disk holding"):
            store.delete(ids[:2])
        assert sorted(store.iter_ids("t")) == sorted(ids)  # nothing was changed
        with caplog.at_level(logging.WARNING, logger="retriever.edge_shard"):
            assert store.optimize() is False  # skipped: searches still answer, unindexed
            assert store.optimize() is False
        said = [r for r in caplog.records if "build the search index" in r.getMessage()]
        assert len(said) == 1, "the skipped index build is said once, not at every idle time"
        store.reserve = 0  # 0: never checked
        store.upsert(nodes, vectors)
        store.delete(ids[:1])
        assert ids[0] not in set(store.iter_ids("t"))
    finally:
        store.close()


def test_a_large_write_looks_at_the_disk_before_each_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One upsert of a build's layer (100k leaves: ~0.7 GB) outgrows any reserve checked once."""
    from retriever import edge_store, room

    store, ids = _built(tmp_path)
    try:
        nodes, vectors = store.retrieve(ids[:3]), store.retrieve_vectors(ids[:3])
        monkeypatch.setattr(edge_store, "UPSERT_BATCH", 2)
        looks: list[int] = []

        def free(path: Path) -> int:  # room for the first batch only
            looks.append(1)
            return HUGE if len(looks) == 1 else 0

        monkeypatch.setattr(room, "free_bytes", free)
        with pytest.raises(StoreFullError, match="to write 1 points"):
            store.upsert(nodes, vectors)
        assert len(looks) == 2
    finally:
        store.close()


def test_creating_a_store_is_refused_without_the_reserve(tmp_path: Path) -> None:
    store = EdgeNodeStore(tmp_path / "qdrant", reserve=HUGE)
    try:
        with pytest.raises(StoreFullError, match="to create the store"):
            store.ensure_collection(8, "m")
    finally:
        store.close()
    assert not any((tmp_path / "qdrant").glob("segments/*"))


@pytest.mark.parametrize(
    ("engine", "hint"),
    [
        ("Failed to flush segment.json: No space left on device (os error 28)", "is full"),
        ("Failed to open mmap payload storage: Read-only file system (os error 30)", "read-only"),
        ("Failed to open wal: Permission denied (os error 13)", "owns the state dir"),
        ("Failed to read chunk: Input/output error (os error 5)", "I/O error"),
    ],
)
def test_the_engines_filesystem_errors_never_advise_deleting_the_store(
    tmp_path: Path, engine: str, hint: str
) -> None:
    """A full, read-only, foreign or failing disk said: "delete the store and rebuild"."""
    store = EdgeNodeStore(tmp_path / "qdrant")
    said = store._describe("open the store", Exception(f"Service runtime error: {engine}"))
    assert hint in said
    assert "what was committed is kept" in said
    assert "rebuild" not in said
    assert f"delete {store.path}" not in said
    other = store._describe("open the store", Exception("Service runtime error: bad magic"))
    assert "adrap rebuild" in other  # a damaged store still says how to start again


def test_the_reserve_names_the_setting_and_what_happens_then(tmp_path: Path) -> None:
    said = room_problem(tmp_path, HUGE, "apply updates", then="and they are applied then")
    assert said is not None
    assert "ADRAP_MIN_FREE_MB" in said
    assert said.endswith("and they are applied then")
    assert room_problem(tmp_path, 0, "apply updates") is None
    assert room_problem(tmp_path, 1, "apply updates") is None


def test_a_disk_out_of_inodes_is_short_whatever_its_free_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk full of small files has bytes free and no inode left: the store could not make
    the files of a new segment (the engine's error then read "the disk is full, 60 GiB free")."""
    real = os.statvfs

    def statvfs(path: object) -> os.statvfs_result:
        st = real(path)  # type: ignore[arg-type]
        fields = list(st)
        fields[7] = 12  # f_favail: 12 more files
        return os.statvfs_result(fields)

    monkeypatch.setattr(os, "statvfs", statvfs)
    said = room_problem(tmp_path, 1, "write 3 points")
    assert said is not None
    assert "12 more files may be made" in said
    assert room_problem(tmp_path, 0, "write 3 points") is None  # 0: never checked
    fields = list(real(tmp_path))
    fields[5], fields[7] = 0, 0  # f_files 0: a filesystem that keeps no count (btrfs)
    monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result(fields))
    assert room_problem(tmp_path, 1, "write 3 points") is None


def test_the_filesystem_type_is_read_from_the_mount_table() -> None:
    assert filesystem_type(Path("/proc/self")) == "proc"
    if os.path.ismount("/dev/shm"):  # its own mount: a tmpfs (a container's too)
        assert filesystem_type(Path("/dev/shm")) in {"tmpfs", "shm"}


# -- a real full filesystem: what SIGBUS killed ---------------------------------------------------

root_only = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a tmpfs needs root"
)

#: Opens the store at argv[1] (reserve argv[2] MiB) and rewrites its nodes; exit 3 on a refusal.
OPEN_AND_WRITE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from retriever import StoreFullError
    from retriever.edge_store import EdgeNodeStore
    try:
        store = EdgeNodeStore(Path(sys.argv[1]), reserve=int(sys.argv[2]) << 20)
        ids = list(store.iter_ids("t"))
        store.upsert(store.retrieve(ids), store.retrieve_vectors(ids))
        store.close()
    except StoreFullError as exc:
        print(exc)
        sys.exit(3)
    print("written")
    """
)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 400 MiB tmpfs (a store is created with 256 MiB free), unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:  # root without CAP_SYS_ADMIN (a container): no filesystem to fill
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount: Path, leave: int) -> Path:
    """Fill ``mount`` until ``leave`` bytes are free."""
    fill = mount / "fill"
    with open(fill, "wb") as f:
        f.truncate(0)
        chunk = b"\0" * MIB
        while free_bytes(mount) > leave + MIB:
            f.write(chunk)
            f.flush()
    return fill


def _open_and_write(store: Path, reserve_mb: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", OPEN_AND_WRITE, str(store), str(reserve_mb)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[3],
    )


@root_only
def test_a_store_on_a_full_tmpfs_refuses_with_the_reason_instead_of_dying(
    small_tmpfs: Path,
) -> None:
    _build(small_tmpfs)  # created, never opened: its mapped files are still sparse
    store = small_tmpfs / "state" / "qdrant"
    fill = _fill(small_tmpfs, 24 * MIB)  # opening fills ~136 MiB of mapped files in memory
    opened = _open_and_write(store, 16)
    assert opened.returncode == 3, (opened.returncode, opened.stdout, opened.stderr[-2000:])
    assert "cannot open the embedded store" in opened.stdout
    assert "tmpfs" in opened.stdout
    assert "MiB free" in opened.stdout
    fill.unlink()
    wrote = _open_and_write(store, 16)  # room again: it opens and writes
    assert wrote.returncode == 0, (wrote.returncode, wrote.stdout, wrote.stderr[-2000:])
    _fill(small_tmpfs, 8 * MIB)
    refused = _open_and_write(store, 16)  # it opens (nothing left to fill), but lacks the reserve
    assert refused.returncode == 3, (refused.returncode, refused.stdout, refused.stderr[-2000:])
    assert "not enough free disk space to write" in refused.stdout
