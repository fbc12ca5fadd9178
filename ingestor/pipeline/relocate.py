"""A share that moved to another path (a NAS remounted elsewhere, a container mounting it at
``/data``): the tree's state records its root, and its sources are relative to it, so moving the
tree with the share is one commit of the new root, after checking that the new folder holds the
tree's files. Nothing is read, embedded or summarised.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ingestor.errors import TreeError
from ingestor.pipeline.context import TreeContext
from ingestor.tree import changelog

#: Files of the tree looked for in the new folder (a random sample; all of a smaller tree).
SAMPLE: Final = 50
#: The share of them the new folder must hold, with the same size, to be the tree's share.
MIN_FOUND: Final = 0.8


@dataclass(frozen=True)
class Relocation:
    """A tree moved to another root: from where, to where, and what the check found."""

    old: str
    new: str
    sampled: int
    found: int


def relocate(context: TreeContext, new_root: Path, *, force: bool = False) -> Relocation:
    """Make ``new_root`` the tree's root, once it is shown to hold the tree's files: of a sample
    of them, at least :data:`MIN_FOUND` are there with the size the tree read (``force``: any).

    Raises:
        TreeError: no tree, the folder is missing, or it does not look like the tree's share
            (the message names files it lacks and how to go on).
    """
    new = Path(os.path.abspath(new_root))
    if not new.is_dir():
        raise TreeError(f"{new} is not a folder; give the folder the share is mounted at now")
    state = context.require_state(recover=True)
    old = state.root
    sources = state.sources.keys_with_prefix("")
    sample = random.Random(0).sample(sources, min(SAMPLE, len(sources)))
    missing = []
    for source in sample:
        entry = state.sources[source]
        try:
            same = (new / source).stat().st_size == entry.size
        except OSError:
            same = False
        if not same:
            missing.append(source)
    found = len(sample) - len(missing)
    if sample and found < MIN_FOUND * len(sample) and not force:
        shown = ", ".join(missing[:5])
        raise TreeError(
            f"{new} does not look like the share of tree {context.tree!r} (built over {old}): "
            f"{len(missing)} of {len(sample)} of its files sampled are not there with the size "
            f"the tree read (e.g. {shown}); give the folder the share is mounted at now, or add "
            "--force to move the tree there anyway (the files it lacks are then removed by the "
            "next reconcile)"
        )
    state.root = str(new)
    changelog.note(
        state, "relocated", started_at=time.time(), detail=f"the share moved: {old} -> {new}"
    )
    context.commit(state)
    return Relocation(old, str(new), len(sample), found)
