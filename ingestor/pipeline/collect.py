"""Read the tree's folder into documents, and tell which sources are gone; write nothing.

A build reads the whole folder, one document at a time (:meth:`Collector.iter_all`); an update
reads what changed under some paths and names the sources that are gone
(:meth:`Collector.collect`). Only a file whose name is absent from a successful listing is gone;
one that cannot be read now keeps its leaves and is recorded in the ledger
(:class:`~ingestor.pipeline.unread.Unread`).
"""

from __future__ import annotations

import itertools
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from ingestor.cluster.parallel import WorkerPool
from ingestor.errors import SourceError, SourceGoneError, SourceUnavailableError, TreeError
from ingestor.pipeline.budget import ReadBudgetError, refused_before
from ingestor.pipeline.chunker import Chunker
from ingestor.pipeline.readers import ReadWorkers, read_files
from ingestor.pipeline.reports import BuildReport, UpdateReport
from ingestor.pipeline.unread import Unread, content_stale_reason, read_settings
from ingestor.read.documents import (
    Document,
    ReadOptions,
    ReadTask,
    ReadThen,
    list_documents,
    read_then,
    read_then_many,
)
from ingestor.read.listing import Listings, confirmed_gone, iter_files, listed_path, source_name
from ingestor.read.names import source_text
from ingestor.tree.params import Progress
from ingestor.tree.state import SourceEntry, TreeState

__all__ = ["PARALLEL_READ_SECONDS", "Collector", "outermost", "source_entry"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A build reads its files here until that has taken this long, then hands the rest to its
#: worker processes: a worker's start costs ~2 s of CPU, more than reading a few thousand text
#: files (300 Markdown files: 0.2 s), less than reading a few dozen Office files.
PARALLEL_READ_SECONDS = 3.0
#: Files a worker reads per task (a task's round trip costs ~1 ms).
FILES_PER_TASK = 8
#: Tasks per worker read ahead of the builder, which embeds meanwhile: enough that the workers
#: keep reading while it embeds a batch, few enough to hold little (2 workers: 128 files).
TASKS_AHEAD = 8


def _read_all(tasks: Iterator[ReadTask[T]], pool: WorkerPool | None) -> Iterator[ReadThen[T]]:
    """:func:`read_then` of each task, in order: here, then, once that has taken
    :data:`PARALLEL_READ_SECONDS`, the rest on ``pool``'s workers (if it has two or more)."""
    if pool is None or pool.workers < 2:
        yield from map(read_then, tasks)
        return
    spent = 0.0
    here = 0
    for task in tasks:
        t0 = time.perf_counter()
        result = read_then(task)
        spent += time.perf_counter() - t0
        here += 1
        yield result
        if spent >= PARALLEL_READ_SECONDS:
            break
    else:
        return
    log.info("read %d files in %.1f s; the build's workers read the rest", here, spent)
    batches = pool.imap(
        read_then_many,
        _batched(tasks, FILES_PER_TASK),
        least=2,
        what=lambda i: f"read of a batch of {FILES_PER_TASK} files (after the first {here})",
        ahead=TASKS_AHEAD,
    )
    yield from itertools.chain.from_iterable(batches)


def _batched(items: Iterator[Any], n: int) -> Iterator[list[Any]]:
    """Lists of ``n`` items in order, the last one shorter (``itertools.batched``, Python 3.12)."""
    while batch := list(itertools.islice(items, n)):
        yield batch


class Collector:
    """Reads files under the tree's root with the read settings, recording each skip in ``unread``.

    Attributes:
        max_file_bytes, ignore, ocr, text_suffixes: the read settings (``ADRAP_READ__*``);
            ``ignore`` None: the default patterns.
        unread: the ledger of files skipped or stale, and why (the CLI and the daemon give it a
            file in the state dir).
        readers: processes that read and chunk each file under a budget of memory and time
            (:mod:`ingestor.pipeline.readers`); None: here. ``chunker``: what ``collect``'s chunk.
        workers: readers an update's files may be read by at once (``ADRAP_BUILD__WORKERS``,
            the build's).
    """

    def __init__(
        self,
        *,
        max_file_bytes: int = 50_000_000,
        ignore: list[str] | None = None,
        ocr: bool = False,
        text_suffixes: Sequence[str] = (),
        readers: ReadWorkers | None = None,
        unread: Unread | None = None,
        workers: int = 1,
    ) -> None:
        self.max_file_bytes = max_file_bytes
        self.ignore = ignore
        self.ocr = ocr
        self.text_suffixes = tuple(text_suffixes)
        self.unread = unread if unread is not None else Unread()
        self.readers = readers
        self.workers = workers
        self.chunker: Chunker | None = None
        budget = readers.budget if readers is not None else None
        self.unread.settings = read_settings(self.options, budget)  # another: read them again

    @property
    def options(self) -> ReadOptions:
        """The read settings, as a reader takes them (a worker process's too)."""
        return ReadOptions(self.max_file_bytes, self.ocr, self.text_suffixes)

    def _ignore(self) -> dict[str, Any]:
        return {} if self.ignore is None else {"ignore": self.ignore}

    def iter_all(
        self,
        root: Path,
        report: BuildReport,
        progress: Progress,
        then: Callable[[Document], T],
        pool: WorkerPool | None = None,
    ) -> Iterator[tuple[Document, T]]:
        """Yield every supported file under ``root`` with ``then(document)``, in listing order, as
        they are read (a build holds a few documents' texts at a time); log and record each
        skipped one. The ledger is written once all are.

        With ``pool``, once reading here has taken :data:`PARALLEL_READ_SECONDS`, the rest of
        the files are read and given to ``then`` (chunked) by its worker processes, a few ahead
        of the consumer; ``then`` must then be picklable (a module-level function or an object
        of one). With ``readers``, they read every file instead (as many as ``pool`` has
        workers), and a file refused for its budget before is not read again until it changes.
        """
        read = 0
        options = self.options
        readers = self.readers

        def refused(path: Path) -> SourceError | None:  # by its budget, and unchanged since
            return None if readers is None else refused_before(self.unread, path, root)

        tasks: Iterator[ReadTask[T]] = (
            (path, root, error or refused(path), options, then)
            for path, error in list_documents(root, **self._ignore())
        )
        workers = pool.workers if pool is not None else 1
        results = _read_all(tasks, pool) if readers is None else readers.map(tasks, workers=workers)
        for path, item, extra in results:
            if isinstance(item, SourceError):
                source = _relative(path, root)
                kind: Literal["skipped", "stale"] = (
                    "stale"
                    if isinstance(item, SourceUnavailableError | SourceGoneError)
                    else "skipped"
                )
                if path.is_dir() and kind == "stale":
                    source += "/"
                if self.unread.note(source, kind, str(item), _stat_or_none(path), kept=False):
                    log.warning("%s %s: %s", kind, source, item)
                report.skipped.append((source, str(item)))
                if isinstance(item, ReadBudgetError):
                    self.unread.flush()  # now: a restart must not read it again
                continue
            self.unread.clear(item.source)
            read += 1
            progress("read", read, 0)
            yield item, cast(T, extra)
        self.unread.flush()

    def collect(
        self,
        state: TreeState,
        paths: list[Path],
        report: UpdateReport,
        held: Callable[[str, Path], bool] | None = None,
    ) -> tuple[list[Document], list[str]]:
        """Read ``paths`` (files or folders under the tree's root): changed docs and gone sources.

        Only a file that is gone is returned as gone: its name is absent from a successful listing
        of its folder. A file that exists but cannot be read now (EACCES, EBUSY, EIO), or whose new
        version cannot be used, keeps its leaves and is recorded as stale in ``self.unread``; a
        folder that cannot be listed keeps everything under it. Skips are logged once per file
        version; a file already skipped in this version is not read again. ``held(source, path)``
        names files a folder's listing keeps without reading (the daemon's quarantine).

        The files to read are listed first, then read in listing order by up to :attr:`workers`
        reader processes (:func:`~ingestor.pipeline.readers.read_files`; a second starts only
        once reading has taken a few seconds): many Office files added at once are read on
        every core the build may use (``ADRAP_BUILD__WORKERS``).
        """
        root = Path(state.root)
        docs: list[Document] = []
        gone: list[str] = []
        pending: list[tuple[Path, os.stat_result | None, str]] = []
        listed: Listings = {}  # one listing a folder for the batch
        for path in outermost(paths):
            try:
                rel = source_text(path.relative_to(root).as_posix())
            except ValueError:
                try:
                    path = root / path.resolve().relative_to(root)
                    rel = source_text(path.relative_to(root).as_posix())
                except ValueError:
                    raise TreeError(
                        f"{source_text(str(path))!r} is outside the tree's root {state.root!r}; "
                        "add files under it or build another tree (ADRAP_TREE=...); if the share "
                        "moved, `adrap relocate NEW_ROOT` moves the tree with it"
                    ) from None
            prefix = "" if rel == "." else rel + "/"
            if not listed_path(root, path):  # the link is judged where its folder is listed
                log.debug("%s is under a symlinked folder, which is never entered", rel)
                continue
            try:
                is_dir = stat.S_ISDIR(os.stat(path).st_mode)
            except OSError as exc:
                if _is_link(path):  # broken or looping: the reader says which, for good
                    self._want(root, path, None, pending)
                    continue
                if not isinstance(exc, FileNotFoundError | NotADirectoryError):
                    why = f"{rel!r} cannot be reached now ({exc.strerror}); what was read is "
                    why += "kept and it is tried again; grant access to the folders on its path"
                    self._unavailable(state, rel, why, report)
                    continue
                if confirmed_gone(path, root, listed):
                    gone.extend(_sources_at(state, rel))
                    self.unread.clear_under(rel if rel != "." else "")
                else:
                    self._unavailable(state, rel, "its folder cannot be listed now", report)
                continue
            if not is_dir:
                self._want(root, path, _stat_or_none(path), pending)
                continue
            seen, kept = self._collect_folder(state, path, root, pending, report, held)
            self.unread.clear_unlisted(prefix, seen, kept)
            gone.extend(
                s
                for s in state.sources.keys_with_prefix(prefix)
                if s not in seen and not s.startswith(tuple(kept))
            )
        self._read_pending(state, root, pending, docs, report)
        self.unread.flush()
        return docs, gone

    def _collect_folder(
        self,
        state: TreeState,
        folder: Path,
        root: Path,
        pending: list[tuple[Path, os.stat_result | None, str]],
        report: UpdateReport,
        held: Callable[[str, Path], bool] | None,
    ) -> tuple[set[str], list[str]]:
        """List the files under ``folder`` that changed into ``pending`` (to be read); skip the
        rest by (size, mtime_ns, inode).

        Returns the sources seen in the listing (read or not) and the folders that could not be
        listed (``sub/``: every source under them is kept).
        """
        seen: set[str] = set()
        kept: list[str] = []
        unchanged = 0
        for p, error in iter_files(root, under=folder, **self._ignore()):
            source = source_name(p, root) or source_text(p.as_posix())
            if error is not None:  # a folder: unreadable now (kept), or a link that is refused
                if isinstance(error, SourceUnavailableError):
                    kept.append(source + "/")
                    self._unavailable(state, source + "/", str(error), report)
                else:
                    self._skip(source, str(error), None, report)
                    seen.add(source)  # listed (as refused): its ledger entry stays
                continue
            seen.add(source)
            if held is not None and held(source, p):
                continue
            st = _stat_or_none(p)
            entry = state.sources.get(source)
            if (
                entry is not None
                and st is not None
                and entry.unchanged(st)
                and self._chunked(state, entry)
            ):
                unchanged += 1
                self.unread.clear(source)
                continue
            self._want(root, p, st, pending)
        report.files_unchanged += unchanged
        return seen, kept

    def _chunked(self, state: TreeState, entry: SourceEntry) -> bool:
        """Whether ``entry``'s leaves are chunked as this collector's files are now (a change of
        ``ADRAP_CHUNK__*`` reads each file again, to be chunked the new way)."""
        return self.chunker is None or state.chunked_as(entry, self.chunker.key) == self.chunker.key

    def _want(
        self,
        root: Path,
        path: Path,
        st: os.stat_result | None,
        pending: list[tuple[Path, os.stat_result | None, str]],
    ) -> None:
        """Add one file (``st``: its stat before the read) to those to read, unless the ledger
        already knows this version fails (recorded and logged once)."""
        source = source_name(path, root) or source_text(path.as_posix())
        if self.unread.known(source, st) is None:
            pending.append((path, st, source))

    def _read_pending(
        self,
        state: TreeState,
        root: Path,
        pending: list[tuple[Path, os.stat_result | None, str]],
        docs: list[Document],
        report: UpdateReport,
    ) -> None:
        """Read the files listed into ``docs``, in order, or record why each could not be.

        Never a deletion here."""
        paths = [path for path, _, _ in pending]
        if self.readers is None:
            outcomes: Iterable[Document | SourceError] = (self._read_here(p, root) for p in paths)
        else:
            outcomes = read_files(
                self.readers, paths, root, self.options, self.chunker, workers=self.workers
            )
        for (_, st, source), outcome in zip(pending, outcomes, strict=True):
            if not isinstance(outcome, SourceError):
                docs.append(outcome)
                self.unread.clear(outcome.source)
            elif isinstance(outcome, SourceGoneError):
                # vanished mid-read: a later event (or rescan) decides whether it is gone
                self._unavailable(state, source, str(outcome), report)
            elif isinstance(outcome, SourceUnavailableError):
                self._unavailable(state, source, str(outcome), report, st)
            else:
                if source not in state.sources:
                    self._skip(source, str(outcome), st, report)
                else:
                    reason = content_stale_reason(str(outcome))
                    if self.unread.note(source, "stale", reason, st, kept=True):
                        log.warning("stale %s: %s", source, outcome)
                        report.stale.append((source, reason))
                if isinstance(outcome, ReadBudgetError):
                    self.unread.flush()  # now: a restart must not read it again

    def _read_here(self, path: Path, root: Path) -> Document | SourceError:
        """One file read in this process (no reader processes), or what refused it."""
        try:
            return self.options.read(path, root)
        except SourceError as exc:
            return exc

    def _skip(
        self, source: str, reason: str, st: os.stat_result | None, report: UpdateReport
    ) -> None:
        if self.unread.note(source, "skipped", reason, st, kept=False):
            log.warning("skipped %s: %s", source, reason)
            report.skipped.append((source, reason))

    def _unavailable(
        self,
        state: TreeState,
        source: str,
        reason: str,
        report: UpdateReport,
        st: os.stat_result | None = None,
    ) -> None:
        kept = source in state.sources or bool(
            source.endswith("/") and state.sources.keys_with_prefix(source)
        )
        if self.unread.note(source, "stale", reason, st, kept=kept):
            log.warning("stale %s: %s", source, reason)
            report.stale.append((source, reason))

    def sources_under(self, state: TreeState, paths: list[Path]) -> list[str]:
        """Return the sources of the tree named by ``paths`` (files or folders, existing or not)."""
        root = Path(state.root)
        out: list[str] = []
        for path in paths:
            try:
                rel = source_text(path.resolve().relative_to(root).as_posix())
            except ValueError:
                raise TreeError(
                    f"{source_text(str(path))!r} is outside the tree's root {state.root!r}"
                ) from None
            found = _sources_at(state, rel)
            if not found:
                raise TreeError(
                    f"{str(path)!r} is not in tree {state.tree!r} (no document at or under "
                    f"{rel!r}); `adrap status` shows the tree"
                )
            out.extend(found)
        return out


def _sources_at(state: TreeState, rel: str) -> list[str]:
    """Return the source ``rel`` if the tree has it, else the sources under folder ``rel``
    (one key lookup or one range scan: never a pass over every source)."""
    if rel != "." and rel in state.sources:
        return [rel]
    return state.sources.keys_with_prefix("" if rel == "." else rel + "/")


def _is_link(path: Path) -> bool:
    """Whether ``path`` itself is a symbolic link (its folders looked up as they are now)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _stat_or_none(path: Path) -> os.stat_result | None:
    """``path.stat()``, or None where it cannot be had."""
    try:
        return path.stat()
    except OSError:
        return None


def _relative(path: Path, root: Path) -> str:  # a build of one file: its name
    return source_name(path, root) or source_text(path.name)


def source_entry(
    doc: Document, leaf_ids: list[str], access: str = "", chunker: str = ""
) -> SourceEntry:
    """Return the state's record of ``doc``, read now, whose leaves are ``leaf_ids`` in order
    (chunked as ``chunker`` says: ``Chunker.key``) and whose access class is ``access``."""
    return SourceEntry(
        doc.content_hash,
        doc.size,
        doc.mtime,
        leaf_ids,
        doc.mtime_ns,
        doc.inode,
        access,
        chunker,
        doc.ctime_ns,
    )


def outermost(paths: Iterable[Path]) -> list[Path]:
    """Return ``paths`` made absolute, each once, less those under another of them, in their
    order: a folder's listing covers everything under it (a file, a gone folder's sources, a
    folder that cannot be reached now and all under it).

    A batch of a ``mkdir -p`` of 400 folders held each folder, and each was listed with all
    below it: 80,000 steps of the walk and the file at the bottom read 400 times (30 s of the
    writer at depth 400, growing with its square)."""
    given = [Path(os.path.abspath(p)) for p in paths]
    kept: set[Path] = set()
    last: tuple[str, ...] | None = None
    for path in sorted(set(given), key=lambda p: p.parts):
        if last is not None and path.parts[: len(last)] == last:
            continue  # under the last one kept (sorted: its descendants follow it)
        kept.add(path)
        last = path.parts
    return [path for path in dict.fromkeys(given) if path in kept]
