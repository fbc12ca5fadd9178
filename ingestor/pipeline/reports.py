"""What a build or an update did: the reports the CLI prints and the daemon logs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ingestor.tree.adrap import UpdateStats
from ingestor.tree.build import BuildStats


@dataclass
class BuildReport:
    """What ``build`` did: files, nodes per layer, skipped files with reasons, and stage times."""

    files: int = 0
    leaves: int = 0
    layers: dict[int, int] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    stats: BuildStats = field(default_factory=BuildStats)
    seconds: float = 0.0
    #: The builder process's CPU seconds (all its threads; not its workers') per stage group:
    #: ``read_embed`` (reading what workers did not, chunking, embedding, checkpoint writes),
    #: ``layers`` (clustering, summaries, their embedding), ``commit``, ``store``, ``index``. With
    #: two workers or more, what stays serial in the builder (``bench/memory.py`` projects from it).
    cpu: dict[str, float] = field(default_factory=dict)


@dataclass
class UpdateReport:
    """What ``update`` did."""

    files_added: int = 0
    files_changed: int = 0
    files_removed: int = 0
    #: Files moved or renamed with their text unchanged: their leaves kept their places
    #: (``ingestor.pipeline.moves``); counted neither as added nor as removed.
    files_moved: int = 0
    files_unchanged: int = 0
    #: Files whose permissions changed (their points' access classes rewritten, nothing read).
    files_reclassed: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: Files (or folders, ``sub/``) that exist but could not be read now: their leaves are kept.
    stale: list[tuple[str, str]] = field(default_factory=list)
    stats: UpdateStats = field(default_factory=UpdateStats)
    rebuilt: bool = False
    #: Why the layers were built again (``first build``, the drift past the threshold, ...).
    rebuilt_why: str = ""
    seconds: float = 0.0
    #: Wall-clock time the update started (every node it wrote is stamped at or after it).
    started_at: float = field(default_factory=time.time)
    #: Bytes the update wrote to the state database.
    state_bytes: int = 0
    #: A refresh of stale summaries (no file changed), not an update.
    refresh: bool = False
    #: The drift past the threshold of a tree too large to rebuild by itself (None: not past).
    drift_past: float | None = None

    def _rebuilt_line(self) -> str:
        return f"full rebuild ({self.rebuilt_why or 'drift'}); " if self.rebuilt else ""

    def summary(self) -> str:
        """Return the one-line account printed by the CLI and logged by the daemon."""
        s = self.stats
        return (
            f"files +{self.files_added} ~{self.files_changed} -{self.files_removed} "
            f"(={self.files_unchanged})"
            f"{f', {self.files_moved} moved' if self.files_moved else ''}"
            f"{f', {self.files_reclassed} with new permissions' if self.files_reclassed else ''}"
            f"; leaves +{s.leaves_added} -{s.leaves_removed}; clusters "
            f"changed {s.clusters_changed}, created {s.clusters_created}, split {s.clusters_split}, "
            f"removed {s.clusters_removed}; summaries regenerated {s.summaries_regenerated} "
            f"(cache hits {s.summary_cache_hits}, {s.summary_input_tokens} input tokens"
            f"{f', {s.summary_tokens} billed' if s.summary_tokens else ''}), deferred "
            f"{s.summaries_deferred}, within tolerance {s.summaries_tolerated}; "
            f"{self._rebuilt_line()}"
            f"{f'drift {self.drift_past:.2f}: run `adrap rebuild`; ' if self.drift_past else ''}"
            f"{self.seconds:.2f}s"
        )
