"""The share guard: a missing share is never "every file was deleted".

A watched root on a network share can vanish (unmounted, unreachable), come back empty (the bare
mount point), or be mounted from another device. To a folder scan each looks like a user deleting
every file, and deleting the tree would pay for every summary again when the share returns. So the
daemon passes every batch's deletions through :class:`ShareGuard`: while the root is missing,
unreadable, on another device than recorded, or empty while the tree is not, deletions pause (the
rest of the batch lands, queries keep being answered) until the root is back. A batch that would
remove more than ``max_delete_fraction`` of the documents pauses too, until confirmed
(``adrap watch --confirm-deletions``, ``adrap confirm-deletions`` or ``POST /confirm-deletions``).

The root's ``st_dev`` is recorded in ``<state_dir>/share.json`` the first time the daemon sees the
root available.

A share moved away or unmounted produces no file event at all, and one that comes back is a new
directory the file observer is not watching, so the daemon also checks the root on its own
(:class:`RootMonitor`, every ``watch.root_check_interval`` seconds, in a thread of its own: a hung
mount blocks ``stat``, never the daemon): it logs when the root goes and comes back, reports it in
``/status``, ``/readyz`` and ``/metrics``, and watches and rescans a root that came back.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ingestor.tree.state import TreeState

log = logging.getLogger(__name__)

SHARE_FILE = "share.json"
#: A batch removing fewer documents than this is never held for confirmation.
MIN_BULK = 3


class DeletionGuard(Protocol):
    def allow(self, state: TreeState, gone: list[str]) -> list[str]: ...


class ShareGuard:
    """Pauses deletions while the share is missing, and bulk deletions until confirmed.

    Args:
        root: the watched folder.
        state_dir: where ``share.json`` (the root's recorded device) lives; None records nothing.
        max_delete_fraction: a batch removing more than this share of the documents is held.
        confirmed: confirm bulk deletions in advance (``--confirm-deletions``).
    """

    def __init__(
        self,
        root: Path,
        state_dir: Path | None,
        *,
        max_delete_fraction: float = 0.5,
        confirmed: bool = False,
    ) -> None:
        self.root = Path(os.path.abspath(root))
        self.file = state_dir / SHARE_FILE if state_dir is not None else None
        self.max_delete_fraction = max_delete_fraction
        self.always_confirmed = confirmed
        self._confirmed = False
        self._lock = threading.Lock()
        self.paused: str | None = None  # why deletions are paused (share missing), or None
        self.awaiting_confirmation: tuple[int, int] | None = None  # (would remove, documents)
        self.device: int | None = self._read_device()

    # -- the share -------------------------------------------------------------------------------

    def unavailable(self, documents: int) -> str | None:
        """Return why the root does not look like the share the tree was built from, or None."""
        return self.probe(documents)[0]

    def probe(self, documents: int) -> tuple[str | None, os.stat_result | None]:
        """Return (why the root is unavailable, None), or (None, the root's ``stat``)."""
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            return f"the watched folder {self.root} is missing", None
        except OSError as exc:
            return f"the watched folder {self.root} cannot be reached ({exc.strerror or exc})", None
        try:
            with os.scandir(self.root) as it:
                empty = next(it, None) is None
        except OSError as exc:
            return f"the watched folder {self.root} cannot be listed ({exc.strerror or exc})", None
        if self.device is not None and st.st_dev != self.device:
            return (
                f"the watched folder {self.root} is on another device ({st.st_dev}) than when the "
                f"tree was built ({self.device}): the share is probably not mounted"
            ), None
        if empty and documents > 0:
            return (
                f"the watched folder {self.root} is empty while the tree has {documents} "
                "documents: the share is probably not mounted"
            ), None
        return None, st

    def record(self) -> None:
        """Record the root's device once (first start, or a state dir from an older version)."""
        if self.device is not None or self.file is None:
            return
        try:
            st = os.stat(self.root)
        except OSError:
            return
        self.device = st.st_dev
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"root": str(self.root), "st_dev": st.st_dev}))
        os.replace(tmp, self.file)

    def _read_device(self) -> int | None:
        if self.file is None:
            return None
        try:
            data = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return None
        dev = data.get("st_dev") if isinstance(data, dict) else None
        return dev if isinstance(dev, int) and data.get("root") == str(self.root) else None

    # -- deletions -------------------------------------------------------------------------------

    def allow(self, state: TreeState, gone: list[str]) -> list[str]:
        """Return the deletions of a batch that may go ahead (all, or none while paused)."""
        gone = list(dict.fromkeys(s for s in gone if s in state.sources))
        if not gone:
            return gone
        documents = len(state.sources)
        reason = self.unavailable(documents)
        with self._lock:
            if reason is not None:
                if self.paused != reason:
                    log.warning(
                        "deletions paused: %s; %d documents are kept and queries are answered "
                        "until it is back",
                        reason,
                        len(gone),
                    )
                self.paused = reason
                return []
            self.paused = None
            bulk = len(gone) >= MIN_BULK and len(gone) > self.max_delete_fraction * documents
            if bulk and not (self.always_confirmed or self._confirmed):
                if self.awaiting_confirmation != (len(gone), documents):
                    log.warning(
                        "deletions paused: this scan would remove %d of %d documents (over %.0f "
                        "%%); confirm with `adrap confirm-deletions` (or POST /confirm-deletions, "
                        "or restart with `adrap watch --confirm-deletions`)",
                        len(gone),
                        documents,
                        100 * self.max_delete_fraction,
                    )
                self.awaiting_confirmation = (len(gone), documents)
                return []
            self._confirmed = False
            self.awaiting_confirmation = None
        return gone

    def confirm(self) -> None:
        """Let the next bulk deletion through (the caller rescans the root)."""
        with self._lock:
            self._confirmed = True
        log.info("bulk deletions confirmed; rescanning %s", self.root)

    def resume(self) -> None:
        """Clear a pause for a missing share (the root is back; the caller rescans it)."""
        with self._lock:
            if self.paused is not None:
                log.warning("the watched folder %s is back; resuming deletions", self.root)
            self.paused = None

    def status(self) -> dict[str, object]:
        """Return the guard's part of ``/status``."""
        with self._lock:
            return {
                "deletions_paused": self.paused,
                "awaiting_confirmation": (
                    None
                    if self.awaiting_confirmation is None
                    else {
                        "would_remove": self.awaiting_confirmation[0],
                        "documents": self.awaiting_confirmation[1],
                    }
                ),
            }


class RootMonitor:
    """Checks the watched root every ``interval`` seconds, in a thread of its own.

    Each change is logged once. :meth:`poll` (the daemon's loop, every second) says once that the
    root is available again after a problem, or is another directory than before (a remount):
    the caller watches it afresh and rescans it. A check still waiting after ``hung_after``
    seconds (a hung mount blocks ``stat``) is reported as such; it blocks only this thread.

    Args:
        guard: the share guard (its ``probe`` is the check).
        documents: returns how many documents the tree has (an empty root is a problem then).
        interval: seconds between checks.
        hung_after: a check running longer than this is reported as a hung share.
    """

    def __init__(
        self,
        guard: ShareGuard,
        documents: Callable[[], int],
        *,
        interval: float = 2.0,
        hung_after: float = 10.0,
    ) -> None:
        self.guard = guard
        self.documents = documents
        self.interval = interval
        self.hung_after = hung_after
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._problem: str | None = None
        self._identity: tuple[int, int] | None = None
        self._started: float | None = None  # when the running check began
        self._hung = False  # the running check was reported as hung
        self._returned = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="adrap-root-check", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop checking (a check blocked on a hung mount is left to the process's exit)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self.interval)

    def check(self) -> None:
        """Check the root once (blocks while the share does)."""
        with self._lock:
            self._started = time.monotonic()
        problem, st = self.guard.probe(self.documents())
        identity = None if st is None else (st.st_dev, st.st_ino)
        with self._lock:
            self._started = None
            back = self._hung or self._problem is not None
            if problem is not None:
                if problem != self._problem:
                    log.warning(
                        "%s; the tree is kept and queries are answered until it is back", problem
                    )
            elif back or (self._identity is not None and identity != self._identity):
                log.warning(
                    "the watched folder %s is %s: watching it afresh and rescanning it",
                    self.guard.root,
                    "back" if back else "another directory than before (remounted?)",
                )
                self._returned = True
            self._problem, self._hung = problem, False
            if identity is not None:
                self._identity = identity

    def poll(self) -> bool:
        """Return True once after the root came back or was replaced; log a hung check once."""
        with self._lock:
            problem = self._hung_problem()
            if problem is not None and not self._hung:
                self._hung = True
                log.warning("%s; the tree is kept and queries are answered", problem)
            returned, self._returned = self._returned, False
        return returned

    def status(self) -> dict[str, object]:
        """Return ``{"available": bool, "problem": str | None}`` (``/status``' watched_folder)."""
        with self._lock:
            problem = self._hung_problem() or self._problem
        return {"available": problem is None, "problem": problem}

    def _hung_problem(self) -> str | None:
        if self._started is None or time.monotonic() - self._started < self.hung_after:
            return None
        return (
            f"the watched folder {self.guard.root} has not answered for "
            f"{time.monotonic() - self._started:.0f} s (a hung mount?)"
        )
