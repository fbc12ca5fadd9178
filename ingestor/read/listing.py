"""List the watched folder: walk it (ignore patterns; symlinked folders never entered), read nothing.

One walk for everything that lists: a build, a rescan of any folder by the daemon
(``iter_files(root, under=folder)``), and the check of an event's path (:func:`listed_path`), so
a symlink to a parent folder, to a folder outside, or to another folder of the share is judged
the same everywhere and a folder is never indexed twice, nor inside itself.

Also the other half of telling what is gone: a file is gone only when its name is absent from a
successful listing of its folder (:func:`confirmed_gone`); a folder that cannot be listed now
proves nothing, so what was read under it is kept. Reading a file is
:mod:`ingestor.read.documents`.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from ingestor.errors import SourceError, SourceUnavailableError
from ingestor.read.names import fs_name, source_text

__all__ = [
    "DEFAULT_IGNORE",
    "MAX_DEPTH",
    "Listings",
    "confirmed_gone",
    "iter_files",
    "listed_path",
    "source_name",
    "source_path",
    "source_text",
]

DEFAULT_IGNORE: tuple[str, ...] = (
    # hidden files and folders (.git, .DS_Store, LibreOffice's .~lock.*#), Office lock files,
    # editors' swap and backup files, partial downloads, Windows' thumbnail and folder files
    ".*", "~$*", "*.swp", "*.tmp", "*.part", ".#*", "*~", "Thumbs.db", "desktop.ini"
)  # fmt: skip


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# a folder to list; a folder only passed through (O_PATH, Linux: search permission is enough)
_LIST = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0) | _NOFOLLOW
_PASS = (_LIST & ~os.O_RDONLY) | getattr(os, "O_PATH", os.O_RDONLY)
# what opening a name with O_NOFOLLOW | O_DIRECTORY says when it is a link or no folder
_NOT_A_FOLDER = {errno.ELOOP, errno.ENOTDIR, getattr(errno, "EMLINK", errno.ELOOP)}

#: Folders listed below the root, at most. A deeper one is skipped, saying why: a share's user can
#: make a chain of thousands (``mkdir -p``), whose walk ran out of Python's stack (every listing
#: of the share failed) and of file descriptors, and a file at its bottom would carry every one
#: of its folders in its points (``source_dirs``: the square of the depth in bytes).
MAX_DEPTH = 64

#: Folders' listings (their names, or why listing failed) kept for a batch of :func:`confirmed_gone`.
Listings = dict[Path, frozenset[str] | OSError]


def iter_files(
    root: Path, *, ignore: Sequence[str] = DEFAULT_IGNORE, under: Path | None = None
) -> Iterator[tuple[Path, SourceError | None]]:
    """Walk the folder ``root`` in sorted order, reading nothing: ``(path, None)`` per file.

    ``ignore`` holds glob patterns matched against each file and directory name (``.*`` also
    skips ``.git/``). A symlink to a file is listed (the reader follows it only while it stays
    inside ``root``); a symlink to a folder is never walked: one out of ``root`` would leak, one
    back to a folder being walked loops, and one to another folder of ``root`` would index that
    folder twice (it is indexed under its own name). Such links, folders that cannot be listed
    and a folder that is its own ancestor (a bind mount) yield ``(path, SourceError)``.

    ``under`` (a folder under ``root``) walks only that part of the tree, by the same rules as
    the whole walk: a path through a symlinked folder is not listed (its link yields the error),
    so a rescan of any folder lists what a build would list there, never more.

    Raises:
        SourceError: ``root`` itself does not exist or cannot be listed.
    """
    try:
        real_root = root.resolve(strict=True)
        top = os.stat(real_root)
    except (OSError, RuntimeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise SourceUnavailableError(
            f"folder {source_text(str(root))!r} cannot be opened ({reason}); check the path"
        ) from exc
    if not stat.S_ISDIR(top.st_mode):
        raise SourceError(
            f"{source_text(str(root))!r} is not a folder or a regular file; check the path"
        )
    chain = [(top.st_dev, top.st_ino)]
    try:
        fd = os.open(real_root, _LIST)
    except OSError as exc:
        yield root, _unlistable(root, root, exc)
        return
    start = root
    if under is not None:
        found = _descend(root, real_root, under, chain, fd)
        if found is None:
            return
        start, opened = found
        if isinstance(opened, SourceError):
            yield start, opened
            return
        fd = opened
    yield from _walk(start, fd, root, real_root, chain, tuple(ignore))


def listed_path(root: Path, path: Path) -> bool:
    """Return False if :func:`iter_files` of ``root`` could never list ``path``: a folder on its
    way is a symlink, which the walk never enters, or it is more than :data:`MAX_DEPTH` folders
    down. Only the folders above ``path`` are looked at (``lstat``); one that cannot be looked
    at now does not decide (True)."""
    rel = _lexical(path, root)
    if rel is None or len(rel.parts) - 1 > MAX_DEPTH:  # under a folder too deep to be listed
        return False
    cur = Path(os.path.abspath(root))
    for part in rel.parts[:-1]:
        cur = cur / part
        try:
            if stat.S_ISLNK(os.lstat(cur).st_mode):
                return False
        except OSError:
            return True
    return True


def _descend(
    root: Path, real_root: Path, under: Path, chain: list[tuple[int, int]], fd: int
) -> tuple[Path, int | SourceError] | None:
    """Walk from ``root`` (``fd``, closed here) to the folder ``under`` as the full walk would
    reach it: ``(folder, its fd)``, ``(path, error)`` for a link or a folder that cannot be
    opened on the way, or None (not a folder the walk lists)."""
    rel = _lexical(under, root)
    cur = Path(os.path.abspath(root))
    try:
        if rel is None:
            raise SourceError(
                f"{source_text(str(under))!r} is outside the folder {source_text(str(root))!r}; "
                "list a folder under it"
            )
        for part in rel.parts:
            cur = cur / part
            try:
                sub = os.open(part, _PASS, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno not in _NOT_A_FOLDER:
                    return cur, _unlistable(cur, root, exc)
                if not stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    return None  # a file
                error = _folder_link_error(cur, root, real_root, chain)
                return (cur, error) if error is not None else None
            os.close(fd)
            fd = sub
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) in chain:
                return cur, _loop(cur, root)
            if len(chain) > MAX_DEPTH:
                return cur, _too_deep(cur, root)
            chain.append((st.st_dev, st.st_ino))
        try:
            return cur, os.open(".", _LIST, dir_fd=fd)
        except OSError as exc:
            return cur, _unlistable(cur, root, exc)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return cur, _unlistable(cur, root, exc)
    finally:
        os.close(fd)


def _walk(
    folder: Path,
    fd: int,
    root: Path,
    real_root: Path,
    chain: list[tuple[int, int]],
    ignore: tuple[str, ...],
) -> Iterator[tuple[Path, SourceError | None]]:
    """List ``folder`` through ``fd`` (closed here), each subfolder opened relative to it with
    ``O_NOFOLLOW``: a folder swapped for a link mid-walk is never listed through the link."""
    try:
        yield from _walk_open(folder, fd, root, real_root, chain, ignore)
    finally:
        os.close(fd)


def _walk_open(
    folder: Path,
    fd: int,
    root: Path,
    real_root: Path,
    chain: list[tuple[int, int]],
    ignore: tuple[str, ...],
) -> Iterator[tuple[Path, SourceError | None]]:
    try:
        with os.scandir(fd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        # Never "everything under it is gone": the folder was in its parent's listing (or is the
        # root, which the share guard watches), so what was read under it is kept.
        yield folder, _unlistable(folder, root, exc)
        return
    for entry in entries:
        if _ignored(entry.name, ignore):
            continue
        path = folder / entry.name
        try:
            link = entry.is_symlink()
            is_dir = entry.is_dir()  # a link: its target's type
        except OSError:  # cannot be looked at now: the reader says why
            yield path, None
            continue
        if link:
            error = _folder_link_error(path, root, real_root, chain) if is_dir else None
            if error is not None or not is_dir:
                yield path, error  # a link to a file: the reader follows it if it stays inside
            continue
        if not is_dir:
            yield path, None
            continue
        if len(chain) > MAX_DEPTH:  # ``chain``: the root and each folder down to this one
            yield path, _too_deep(path, root)
            continue
        try:
            sub = os.open(entry.name, _LIST, dir_fd=fd)
        except OSError as exc:  # EACCES; ELOOP/ENOTDIR: replaced since it was listed
            yield path, _unlistable(path, root, exc)
            continue
        st = os.fstat(sub)
        key = (st.st_dev, st.st_ino)
        if key in chain:
            os.close(sub)
            yield path, _loop(path, root)
            continue
        yield from _walk(path, sub, root, real_root, [*chain, key], ignore)


def _folder_link_error(
    path: Path, root: Path, real_root: Path, chain: list[tuple[int, int]]
) -> SourceError | None:
    """Why the symlink ``path`` to a folder is not walked (None: it no longer is one)."""
    rel = _rel(path, root)
    try:
        real = path.resolve(strict=True)
        st = os.stat(real)
    except RuntimeError as exc:  # Python 3.11 reports a symlink loop that way
        return SourceError(f"folder {rel!r} cannot be resolved ({exc}); remove the link")
    except OSError as exc:
        return SourceUnavailableError(
            f"folder {rel!r} cannot be resolved now ({exc.strerror or exc}); "
            "what was read under it is kept and it is tried again"
        )
    if not stat.S_ISDIR(st.st_mode):
        return None
    if not real.is_relative_to(real_root):
        return SourceError(
            f"folder {rel!r} is a symlink to {source_text(str(real))!r}, outside the root; "
            "links never leave the watched folder: copy the files in instead"
        )
    if (st.st_dev, st.st_ino) in chain:
        return SourceError(
            f"folder {rel!r} is a symlink loop back to {source_text(str(real))!r}; remove the link"
        )
    target = source_text(real.relative_to(real_root).as_posix())
    return SourceError(
        f"folder {rel!r} is a symlink to {target!r}, a folder of the share that is indexed "
        "under its own name; a folder is indexed once: remove the link"
    )


def _unlistable(folder: Path, root: Path, exc: OSError) -> SourceError:
    return SourceUnavailableError(
        f"folder {_rel(folder, root)!r} cannot be listed now ({exc.strerror or exc}); "
        "what was read under it is kept and it is tried again; grant read access or add "
        "it to ADRAP_READ__IGNORE"
    )


def _too_deep(folder: Path, root: Path) -> SourceError:
    return SourceError(
        f"folder {_rel(folder, root)!r} is more than {MAX_DEPTH} folders below the root, "
        "deeper than adrap lists; nothing under it is read: move it up, or add it to "
        "ADRAP_READ__IGNORE"
    )


def _loop(folder: Path, root: Path) -> SourceError:
    return SourceError(
        f"folder {_rel(folder, root)!r} is the same folder as one above it (a bind mount "
        "loop); remove the mount or add it to ADRAP_READ__IGNORE"
    )


def _ignored(name: str, ignore: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in ignore)


def _lexical(path: Path, root: Path) -> Path | None:
    """``path`` relative to ``root`` (as given, or resolved), without resolving ``path``."""
    abs_path = Path(os.path.abspath(path))
    for base in (Path(os.path.abspath(root)), root.resolve()):
        if abs_path.is_relative_to(base):
            return abs_path.relative_to(base)
    return None


def confirmed_gone(path: Path, root: Path, listed: Listings | None = None) -> bool:
    """Return True only if ``path`` is gone: its name is absent from a successful listing.

    The listing is of its nearest existing folder at or under ``root`` (a folder that vanished
    takes its files with it). A folder that cannot be listed, or a missing ``root`` (a share that
    went away: the share guard's business), proves nothing, so the answer is False.

    ``listed`` keeps each folder's listing (or why it failed) for the calls given the same dict:
    a batch of removals from one folder lists it once, not once a file (a folder of 150,000
    files: ~50 ms a listing).
    """
    cur = Path(os.path.abspath(path))
    top = Path(os.path.abspath(root))
    while cur != top and cur.is_relative_to(top):
        names = _listing(cur.parent, listed)
        if isinstance(names, (FileNotFoundError, NotADirectoryError)):
            cur = cur.parent
            continue
        if isinstance(names, OSError):
            return False
        return cur.name not in names
    return False


def _listing(folder: Path, listed: Listings | None) -> frozenset[str] | OSError:
    if listed is not None and folder in listed:
        return listed[folder]
    try:
        names: frozenset[str] | OSError = frozenset(os.listdir(folder))  # a batch looks names up
    except OSError as exc:
        names = exc
    if listed is not None:
        listed[folder] = names
    return names


def _rel(path: Path, root: Path) -> str:
    return source_name(path, root) or source_text(str(path))


def source_name(path: Path, root: Path) -> str | None:
    """Return ``path`` relative to ``root`` as POSIX text, or None if it is not under ``root``.

    Lexical first, so a symlink keeps the name under which it appears in the folder. The text
    is a file's **source**: a name that is not valid UTF-8 is escaped (:func:`source_text`;
    :func:`source_path` gives the path back).
    """
    abs_path = Path(os.path.abspath(path))
    for base in (Path(os.path.abspath(root)), root.resolve()):
        if abs_path.is_relative_to(base) and abs_path != base:
            return source_text(abs_path.relative_to(base).as_posix())
    # ``root`` given through a symlink (macOS /tmp → /private/tmp) and ``path`` already resolved
    parent = abs_path.parent.resolve()
    real_root = root.resolve()
    if parent.is_relative_to(real_root):
        return source_text((parent / abs_path.name).relative_to(real_root).as_posix())
    return None


def source_path(root: Path, source: str) -> Path:
    """Return the path of the file whose source (:func:`source_name`) is ``source``."""
    return root / fs_name(source)
