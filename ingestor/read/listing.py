"""List the watched folder: walk it (ignore patterns, links that stay inside), read nothing.

Also the other half of telling what is gone: a file is gone only when its name is absent from a
successful listing of its folder (:func:`confirmed_gone`); a folder that cannot be listed now
proves nothing, so what was read under it is kept. Reading a file is
:mod:`ingestor.read.documents`.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from ingestor.errors import SourceError, SourceUnavailableError

__all__ = ["DEFAULT_IGNORE", "Listings", "confirmed_gone", "iter_files", "source_name"]

DEFAULT_IGNORE: tuple[str, ...] = (
    # hidden files and folders (.git, .DS_Store, LibreOffice's .~lock.*#), Office lock files,
    # editors' swap and backup files, partial downloads, Windows' thumbnail and folder files
    ".*", "~$*", "*.swp", "*.tmp", "*.part", ".#*", "*~", "Thumbs.db", "desktop.ini"
)  # fmt: skip


#: Folders' listings (their names, or why listing failed) kept for a batch of :func:`confirmed_gone`.
Listings = dict[Path, frozenset[str] | OSError]


def iter_files(
    root: Path, *, ignore: Sequence[str] = DEFAULT_IGNORE
) -> Iterator[tuple[Path, SourceError | None]]:
    """Walk the folder ``root`` in sorted order, reading nothing: ``(path, None)`` per file.

    ``ignore`` holds glob patterns matched against each file and directory name (``.*`` also
    skips ``.git/``). Symlinked directories are followed only while they stay inside ``root`` and
    do not loop back to a directory being walked. Folders that cannot be listed or are unsafe
    links yield ``(path, SourceError)``.

    Raises:
        SourceError: ``root`` itself does not exist or cannot be listed.
    """
    try:
        real_root = root.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise SourceUnavailableError(
            f"folder {str(root)!r} cannot be opened ({reason}); check the path"
        ) from exc
    if not real_root.is_dir():
        raise SourceError(f"{str(root)!r} is not a folder or a regular file; check the path")
    yield from _walk(root, root, real_root, [real_root], tuple(ignore))


def _walk(
    folder: Path,
    root: Path,
    real_root: Path,
    ancestors: list[Path],
    ignore: tuple[str, ...],
) -> Iterator[tuple[Path, SourceError | None]]:
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        # Never "everything under it is gone": the folder was in its parent's listing (or is the
        # root, which the share guard watches), so what was read under it is kept.
        yield (
            folder,
            SourceUnavailableError(
                f"folder {_rel(folder, root)!r} cannot be listed now ({exc.strerror or exc}); "
                "what was read under it is kept and it is tried again; grant read access or add "
                "it to ADRAP_READ__IGNORE"
            ),
        )
        return
    for entry in entries:
        if any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in ignore):
            continue
        path = Path(entry.path)
        try:
            is_dir = entry.is_dir()  # follows symlinks: a link to a folder is walked if safe
        except OSError:
            is_dir = False
        if not is_dir:
            yield path, None
            continue
        try:
            real = path.resolve(strict=True)
        except RuntimeError as exc:  # Python 3.11 reports a symlink loop that way
            yield path, SourceError(f"folder {_rel(path, root)!r} cannot be resolved ({exc})")
            continue
        except OSError as exc:
            yield (
                path,
                SourceUnavailableError(
                    f"folder {_rel(path, root)!r} cannot be resolved now ({exc.strerror or exc}); "
                    "what was read under it is kept and it is tried again"
                ),
            )
            continue
        if not real.is_relative_to(real_root):
            yield (
                path,
                SourceError(
                    f"folder {_rel(path, root)!r} is a symlink to {str(real)!r}, outside the root; "
                    "links never leave the watched folder: copy the files in instead"
                ),
            )
            continue
        if real in ancestors:
            yield (
                path,
                SourceError(
                    f"folder {_rel(path, root)!r} is a symlink loop back to {str(real)!r}; "
                    "remove the link"
                ),
            )
            continue
        yield from _walk(path, root, real_root, [*ancestors, real], ignore)


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
    return source_name(path, root) or str(path)


def source_name(path: Path, root: Path) -> str | None:
    """Return ``path`` relative to ``root`` as POSIX text, or None if it is not under ``root``.

    Lexical first, so a symlink keeps the name under which it appears in the folder.
    """
    abs_path = Path(os.path.abspath(path))
    for base in (Path(os.path.abspath(root)), root.resolve()):
        if abs_path.is_relative_to(base) and abs_path != base:
            return abs_path.relative_to(base).as_posix()
    # ``root`` given through a symlink (macOS /tmp → /private/tmp) and ``path`` already resolved
    parent = abs_path.parent.resolve()
    real_root = root.resolve()
    if parent.is_relative_to(real_root):
        return (parent / abs_path.name).relative_to(real_root).as_posix()
    return None
