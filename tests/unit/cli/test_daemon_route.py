"""`adrap ask` reaches a running daemon with POST (its /ask refuses GET), `adrap query` with GET."""

from __future__ import annotations

from typing import Any

import pytest

from ingestor.cli import query as query_cli
from ingestor.cli.daemon_client import DaemonClient
from ingestor.config import Settings
from ingestor.service import locking


@pytest.mark.parametrize(("route", "method"), [("ask", "POST"), ("query", "GET")])
def test_the_daemon_is_asked_with_the_method_its_route_accepts(
    route: str, method: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[str, str, str, dict[str, Any] | None]] = []

    def request(
        self: DaemonClient, method: str, path: str, params: Any = None, *, timeout: float = 600
    ) -> dict[str, Any]:
        sent.append((self.url, method, path, params))
        return {"mode": "collapsed"}

    holder = {"command": "watch", "pid": 1, "http": "127.0.0.1:9"}
    monkeypatch.setattr(locking, "read_holder", lambda state_dir: holder)
    monkeypatch.setattr(DaemonClient, "request", request)
    s = Settings(_env_file=None, state_dir=tmp_path)  # type: ignore[call-arg]
    out = query_cli.answer_locally_or_by_daemon(s, route, {"q": "why"})
    assert out["answered_by"] == "adrap watch"
    assert sent == [("http://127.0.0.1:9", method, f"/{route}", {"q": "why"})]
