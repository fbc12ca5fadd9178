"""Idle and slow connections never hold the HTTP server (issue 57, item 6): 31 idle TCP
connections made every route, /readyz included, answer 503 for as long as they stayed open.

Real sockets against the real server (uvicorn in its thread); every wait is bounded by a
generous hang guard, never a timing assertion.
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ingestor.service.http import HttpLimits, HttpServer, build_app
from tests.conftest import wait_until

#: Bounds a wait that would hang on the old server (never a timing assertion).
HANG_GUARD = 30.0


async def ok(_: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


@contextmanager
def serving(limits: HttpLimits) -> Iterator[HttpServer]:
    app = build_app([Route("/readyz", ok), Route("/healthz", ok), Route("/status", ok)], None)
    srv = HttpServer(app, "127.0.0.1", 0, limits)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def get(srv: HttpServer, path: str) -> int:
    conn = http.client.HTTPConnection(*srv.address, timeout=HANG_GUARD)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def idle_connections(srv: HttpServer, n: int) -> list[socket.socket]:
    """``n`` connections that send nothing, each accepted by the server."""
    out = []
    for _ in range(n):
        s = socket.create_connection(srv.address, timeout=HANG_GUARD)
        out.append(s)
    return out


def closed_by_server(s: socket.socket) -> bool:
    """True once the server has closed ``s`` (a read returns EOF, or a 503 then EOF)."""
    s.settimeout(0.05)
    try:
        while data := s.recv(4096):
            if not data:
                break
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_forty_idle_connections_leave_readyz_and_every_route_answering() -> None:
    with serving(HttpLimits()) as server:
        answered(server)


def answered(server: HttpServer) -> None:
    held = idle_connections(server, 40)
    try:
        assert get(server, "/readyz") == 200
        assert get(server, "/healthz") == 200
        assert get(server, "/status") == 200
    finally:
        for s in held:
            s.close()


def test_a_connection_that_sends_no_request_head_is_closed() -> None:
    with serving(HttpLimits()) as server:  # within the default head timeout (5 s)
        timed_out(server)


def timed_out(server: HttpServer) -> None:
    (silent,) = idle_connections(server, 1)
    slow = socket.create_connection(server.address, timeout=HANG_GUARD)
    slow.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
    try:
        wait_until(lambda: closed_by_server(silent), HANG_GUARD, "the silent connection closed")
        wait_until(lambda: closed_by_server(slow), HANG_GUARD, "the half-sent head closed")
    finally:
        silent.close()
        slow.close()


def test_one_client_holds_at_most_its_share_of_connections() -> None:
    with serving(HttpLimits(head_timeout=600.0, per_client=8)) as server:
        shared(server)


def shared(server: HttpServer) -> None:
    held = idle_connections(server, 12)
    try:
        wait_until(
            lambda: sum(closed_by_server(s) for s in held) >= 4,
            HANG_GUARD,
            "the oldest idle connections of the client closed",
        )
        assert not any(closed_by_server(s) for s in held[-8:])  # the newest are kept
    finally:
        for s in held:
            s.close()
