"""The daemon's HTTP routes: ``/healthz`` ``/readyz`` ``/metrics`` ``/status`` ``/query`` ``/ask``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from ingestor.errors import SummarizationError
from retriever import RetrieverError

if TYPE_CHECKING:
    from ingestor.service.daemon import Daemon

log = logging.getLogger(__name__)


def handler_for(daemon: Daemon) -> type[BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[dict[str, str]], tuple[int, str, str]]] = {}

    def healthz(_: dict[str, str]) -> tuple[int, str, str]:
        return 200, "text/plain; charset=utf-8", "ok\n"

    def readyz(_: dict[str, str]) -> tuple[int, str, str]:
        if daemon.metrics.ready:
            return 200, "text/plain; charset=utf-8", "ready\n"
        return 503, "text/plain; charset=utf-8", "reconciling\n"

    def metrics(_: dict[str, str]) -> tuple[int, str, str]:
        body = daemon.metrics.prometheus(daemon.pending())
        return 200, "text/plain; version=0.0.4; charset=utf-8", body

    def status(_: dict[str, str]) -> tuple[int, str, str]:
        out = daemon.metrics.status(daemon.pending()) | {"root": str(daemon.root)}
        return 200, "application/json", json.dumps(out, ensure_ascii=False)

    def answering(
        fn: Callable[[dict[str, str]], dict[str, Any]],
    ) -> Callable[[dict[str, str]], tuple[int, str, str]]:
        def route(params: dict[str, str]) -> tuple[int, str, str]:
            if not daemon.metrics.ready:
                return 503, "application/json", json.dumps({"error": "reconciling; retry shortly"})
            try:
                out = fn(params)
            except ValueError as exc:
                return 400, "application/json", json.dumps({"error": str(exc)})
            except SummarizationError as exc:  # the LLM failed: no partial answer
                return 502, "application/json", json.dumps({"error": str(exc)})
            except RetrieverError as exc:
                return 503, "application/json", json.dumps({"error": str(exc)})
            return 200, "application/json", json.dumps(out, ensure_ascii=False)

        return route

    routes.update(
        {
            "/healthz": healthz,
            "/readyz": readyz,
            "/metrics": metrics,
            "/status": status,
            "/query": answering(daemon.query),
            "/ask": answering(daemon.ask),
        }
    )

    class Handler(BaseHTTPRequestHandler):
        server_version = "adrap"

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            route = routes.get(url.path)
            if route is None:
                code, ctype, body = (
                    404,
                    "text/plain; charset=utf-8",
                    f"not found; try {' '.join(routes)}\n",
                )
            else:
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                code, ctype, body = route(params)
            data = body.encode("utf-8")
            self.send_response(HTTPStatus(code))
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s " + format, self.address_string(), *args)

    return Handler
