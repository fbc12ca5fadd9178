"""`adrap ask` reaches a running daemon with POST (its /ask refuses GET), `adrap query` with GET."""

from __future__ import annotations

import io
import json
import urllib.request
from typing import Any

import pytest

from ingestor.cli import query as query_cli
from ingestor.config import Settings
from ingestor.service import locking


@pytest.mark.parametrize(("route", "method"), [("ask", "POST"), ("query", "GET")])
def test_the_daemon_is_asked_with_the_method_its_route_accepts(
    route: str, method: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[urllib.request.Request] = []

    def urlopen(request: urllib.request.Request, timeout: float) -> Any:
        sent.append(request)
        return io.BytesIO(json.dumps({"mode": "collapsed"}).encode())

    holder = {"command": "watch", "pid": 1, "http": "127.0.0.1:9"}
    monkeypatch.setattr(locking, "read_holder", lambda state_dir: holder)
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    s = Settings(_env_file=None, state_dir=tmp_path)  # type: ignore[call-arg]
    out = query_cli.answer_locally_or_by_daemon(s, route, {"q": "why"})
    assert out["answered_by"] == "adrap watch"
    assert sent[0].get_method() == method
    assert sent[0].full_url.startswith(f"http://127.0.0.1:9/{route}?q=why")
