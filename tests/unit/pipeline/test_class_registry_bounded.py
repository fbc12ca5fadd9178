"""The access classes a tree remembers stay the ones its points name: a file whose permissions
change again and again (a share kept for years) left every class it ever had in the registry,
its file rewritten whole at each new one, and every restricted reader's filter listing them all.
A full permission pass now forgets the classes no point names; a stale summary keeps its own."""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest.mock import patch

from ingestor.pipeline.access import TreeAccess, named_classes
from ingestor.read.access_classes import AccessClass, ClassRegistry, Identity, Step
from testkit.corpus import make_pipeline
from tests.unit.service.test_watcher import write_corpus

OTHER = Identity("someone else", 54321, frozenset({54321}))


def test_a_full_pass_forgets_the_classes_no_point_names(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 6)
    for f in root.iterdir():
        os.chmod(f, 0o644)
    path = tmp_path / "classes.json"
    registry = ClassRegistry(path)
    p = make_pipeline(tmp_path, access=TreeAccess(registry))
    p.build(root)
    try:
        state = p.require_state()
        for mode in (0o600, 0o640, 0o604, 0o660, 0o606, 0o644, 0o600):
            os.chmod(root / "d0.txt", mode)
            p.update_access(state)
            named = named_classes(state, p.context.access.counts)
            assert registry.ids() == named, f"mode {mode:o}: only the classes points name"
            live = [c for c in json.loads(path.read_text()) if not c.get("retired")]
            assert len(live) == len(named)
        assert len(registry) == 2, "the world-readable files' class and d0's 600"
        assert registry.readable(OTHER) == (state.sources["d1.txt"].access,)
        # the classes d0 had are retired: the change log's records of them stay readable
        retired = registry.readable(OTHER, history=True)
        assert set(retired) > set(registry.readable(OTHER))
        assert ClassRegistry(path).readable(OTHER, history=True) == retired
        stored = {c for n in p.context.store.retrieve(list(state.nodes)) for c in n.access}
        assert stored <= registry.ids(), "every class a point names is still judged"
        assert len(ClassRegistry(path)) == 2, "as the file says, for the next process"
    finally:
        p.context.store.close()


def test_retired_classes_are_bounded_and_a_class_in_use_again_is_live(tmp_path: Path) -> None:
    path = tmp_path / "classes.json"
    registry = ClassRegistry(path)
    world = AccessClass.of([Step(0, 0, 0o644, 4, ())])
    mine = AccessClass.of([Step(OTHER.uid or 0, 0, 0o600, 4, ())])
    for cls in (world, mine):
        registry.add(cls)
    assert registry.retain({world.id}, registry.ids()) == 1
    assert registry.readable(OTHER) == (world.id,)  # a query filter lists live classes only
    assert set(registry.readable(OTHER, history=True)) == {world.id, mine.id}
    registry.add(mine)  # a file of that class again
    assert set(registry.readable(OTHER)) == {world.id, mine.id}
    assert len(json.loads(path.read_text())) == 2, "live once, not live and retired"
    monkey = [AccessClass.of([Step(1000 + i, 0, 0o600, 4, ())]) for i in range(5)]
    for cls in monkey:
        registry.add(cls)
    with patch("ingestor.read.access_classes.MAX_RETIRED", 3):
        registry.retain({world.id}, registry.ids())
    rows = json.loads(path.read_text())
    assert [r["id"] for r in rows if r.get("retired")] == [c.id for c in monkey[-3:]]
