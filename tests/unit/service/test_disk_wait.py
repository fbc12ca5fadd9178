"""A daemon whose disk runs short: updates wait, unread, and land once there is room.

Before, a daemon on a disk that filled up wrote into the store's memory-mapped files and was
killed by SIGBUS, with no message; its supervisor restarted it and it died again at the first
write. Now every update, permission pass and maintenance waits while the embedded store's disk
has less than ``ADRAP_MIN_FREE_MB`` free: the first wait is logged once with the reason,
``/status`` and ``/metrics`` show the free space, queries are answered, and the updates land
when there is room again.
"""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path

import pytest

from testkit.corpus import doc_text, make_pipeline
from testkit.daemons import make_daemon
from tests.conftest import wait_until
from tests.unit.service.test_watcher import write_corpus

HUGE_MB = 1 << 30  # more MiB than any disk has


def test_updates_wait_for_disk_space_and_land_once_there_is_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 4)
    p = make_pipeline(tmp_path)
    p.build(root)
    read: list[int] = []
    collect = p.collect

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        read.append(1)
        return collect(*args, **kwargs)

    p.collect = counting  # type: ignore[method-assign]
    d = make_daemon(p, root, debounce=0.05, max_backoff=0.2)
    d.min_free_mb = HUGE_MB  # the disk is short of the reserve
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    with caplog.at_level(logging.INFO):
        t.start()
        try:
            wait_until(lambda: d.metrics.ready and d.watcher is not None)
            (root / "new.txt").write_text(doc_text(random.Random(5), 6))
            wait_until(lambda: "updates wait" in caplog.text)
            disk = d.api.status()["disk"]
            assert disk["writes_wait"] is True
            assert disk["min_free_mb"] == HUGE_MB
            assert disk["free_bytes"] > 0
            assert disk["free_files"] is None or disk["free_files"] > 0
            gauge = d.api.gauges()["disk_free_bytes"]  # a moment later: others write meanwhile
            assert abs(gauge - disk["free_bytes"]) < 64 << 20
            w = d.watcher
            assert w is not None
            looks: list[int] = []
            room = w.room
            assert room is not None
            w.room = lambda: looks.append(1) or room()
            wait_until(lambda: len(looks) >= 2, what="the disk looked at again")
            assert d.pending() >= 1, "the change waits"
            assert read == [], "nothing is read (or embedded) for an update that cannot land"
            assert "new.txt" not in p.require_state().sources
            answer = d.queries.query({"q": "the tree", "max_tokens": "200"})
            assert answer["hits"], "queries are answered meanwhile"
            waits = [r for r in caplog.records if "updates wait" in r.getMessage()]
            assert len(waits) == 1, "said once, not at every retry"
            assert "ADRAP_MIN_FREE_MB" in waits[0].getMessage()
            assert "MiB free on the disk holding" in waits[0].getMessage()
            d.min_free_mb = 0  # room again
            wait_until(lambda: "new.txt" in p.require_state().sources)
            assert "the disk has room again" in caplog.text
            assert d.api.status()["disk"]["writes_wait"] is False
        finally:
            stop.set()
            t.join(60)
            p.context.store.close()
