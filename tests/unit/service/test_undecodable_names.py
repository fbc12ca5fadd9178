"""The daemon over a share holding file names that are not UTF-8: it starts, indexes them, and
``/status``, ``/dashboard/api/updates`` and ``/query`` answer with the names escaped."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

from testkit.daemons import make_daemon
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline, write_corpus

OWNER = {"Authorization": "Bearer owner-token"}


def get(url: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, headers=OWNER)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            body = resp.read()
            is_json = resp.headers.get_content_type() == "application/json"
            return resp.status, json.loads(body) if is_json else {"text": body.decode()}
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read().decode(errors="replace")}


def write_raw(folder: Path, name: bytes, text: str) -> None:
    with open(os.fsencode(folder) + b"/" + name, "w", encoding="utf-8") as f:
        f.write(text)


def test_the_daemon_starts_indexes_and_reports_undecodable_names(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_corpus(root, 3)
    write_raw(root, b"caf\xe9 notes.txt", "The heron waits by the reed bed at dawn.\n")
    write_raw(root, b"bad\xff.xyz", "an unsupported file\n")  # skipped: listed by its name
    p = make_pipeline(tmp_path)
    d = make_daemon(p, root, debounce=0.1, http_port=0, http_token="owner-token")
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.address is not None or not t.is_alive(), timeout=60)
        assert t.is_alive(), "the daemon stopped at start"
        assert d.address is not None
        base = "http://{}:{}".format(*d.address)
        wait_until(lambda: get(base + "/readyz")[0] == 200, timeout=60)
        write_raw(root, b"r\xe9sum\xe9.txt", "The otter slides into the cold river.\n")
        wait_until(lambda: get(base + "/status")[1].get("documents") == 5, timeout=30)
        code, status = get(base + "/status")
        assert code == 200, status
        unread = status["unread"]
        assert isinstance(unread, dict)
        assert [row["source"] for row in unread["skipped_files"]] == ["bad\\xff.xyz"]
        code, updates = get(base + "/dashboard/api/updates")
        assert code == 200, updates
        assert updates["unread"] == unread  # the /status document inside it, names and all
        assert updates["updates"]
        code, found = get(base + "/query?q=heron+reed+bed+otter+river&max_tokens=2000")
        assert code == 200, found
        hits = found["hits"]
        assert isinstance(hits, list)
        assert {"caf\\xe9 notes.txt", "r\\xe9sum\\xe9.txt"} <= {h["source"] for h in hits}
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
    assert not t.is_alive()
