"""The HTTP server's connections: none idles without a request, no client takes every slot.

uvicorn times out a kept-alive connection idle after a response, but not one that never sends a
request, nor a request head sent a byte at a time; and its ``limit_concurrency`` counts every
open connection, so 31 idle sockets made every route, ``/readyz`` included, answer 503 for as
long as they stayed open (issue 57, item 6). The protocol here, uvicorn's h11 one subclassed:

- closes a connection that has not sent a complete request head ``head_timeout`` seconds after
  it opened or after its last response (a partial head does not restart the clock);
- lets one client address hold ``per_client`` connections: one more closes that client's oldest
  idle connection (no request in progress), or is refused (503, closed) if all are busy;
- holds ``concurrency + PROBE_SPARE`` connections in all: one more closes the oldest idle one of
  any client, or is refused;
- counts requests in progress, not connections: past ``concurrency`` a request gets 503, except
  ``/healthz`` and ``/readyz``, which are always answered (they take no lock).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Final

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["PROBES", "PROBE_SPARE", "ConnectionGuard"]

log = logging.getLogger(__name__)

#: Paths answered even when ``concurrency`` requests are in progress: the health probes.
PROBES: Final = frozenset({"/healthz", "/readyz"})
#: Connections kept beyond ``concurrency`` so a probe finds one while every slot is busy.
PROBE_SPARE: Final = 4
#: Seconds between two warnings about the same client's refused connections.
WARN_EVERY: Final = 60.0


class ConnectionGuard:
    """The connection limits of one server, and what they share (requests in progress).

    Args:
        concurrency: requests in progress at once (``ADRAP_WATCH__HTTP_CONCURRENCY``).
        head_timeout: seconds a connection may take to send a complete request head
            (``ADRAP_WATCH__HTTP_HEAD_TIMEOUT``).
        per_client: connections one client address may hold (``ADRAP_WATCH__HTTP_PER_CLIENT``).
    """

    def __init__(self, concurrency: int, head_timeout: float, per_client: int) -> None:
        self.concurrency = concurrency
        self.head_timeout = head_timeout
        self.per_client = per_client
        self.max_connections = concurrency + PROBE_SPARE
        self.in_progress = 0
        self._warned: dict[str, float] = {}

    def protocol(self, base: type[Any] | None = None) -> type[Any]:
        """uvicorn's h11 protocol (or ``base``, a subclass of it) under these limits."""
        from uvicorn.protocols.http.h11_impl import H11Protocol

        guard = self

        class GuardedProtocol(base or H11Protocol):  # type: ignore[misc]
            app: ASGIApp  # uvicorn's, wrapped below

            def connection_made(self, transport: asyncio.Transport) -> None:
                super().connection_made(transport)
                self.app = guard.bounded(self.app)
                self.head_timer: asyncio.TimerHandle | None = None
                self.idle_since = time.monotonic()
                self.arm()
                guard.admit(self)

            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                if not guard.idle(self):  # a complete head: the request runs
                    self.disarm()

            def on_response_complete(self) -> None:
                super().on_response_complete()
                self.arm()  # the next request's head is due within the timeout too

            def connection_lost(self, exc: Exception | None) -> None:
                self.disarm()
                super().connection_lost(exc)

            def arm(self) -> None:
                self.disarm()
                self.idle_since = time.monotonic()
                if guard.idle(self) and not self.transport.is_closing():
                    self.head_timer = self.loop.call_later(guard.head_timeout, self.head_late)

            def disarm(self) -> None:
                if self.head_timer is not None:
                    self.head_timer.cancel()
                    self.head_timer = None

            def head_late(self) -> None:
                self.head_timer = None
                if guard.idle(self) and not self.transport.is_closing():
                    log.debug("closed a connection from %s: no request head", _host(self))
                    self.transport.close()

        return GuardedProtocol

    @staticmethod
    def idle(conn: Any) -> bool:
        """True if ``conn`` has no request in progress (it waits for, or reads, a head)."""
        return conn.cycle is None or bool(conn.cycle.response_complete)

    def admit(self, conn: Any) -> None:
        """Make room for the new ``conn`` (close the oldest idle connections past a limit), or
        refuse it when every connection in the way is busy."""
        host = _host(conn)
        live = [c for c in conn.connections if c is not conn and not c.transport.is_closing()]
        mine = [c for c in live if _host(c) == host]
        if len(mine) >= self.per_client and not _close_oldest_idle(mine):
            self._refuse(
                conn,
                f"{host} holds {len(mine)} connections, all busy; the most one client may hold "
                "is ADRAP_WATCH__HTTP_PER_CLIENT: wait for an answer, or raise it",
            )
        elif len(live) >= self.max_connections and not _close_oldest_idle(live):
            self._refuse(
                conn,
                f"all {len(live)} connections are busy (ADRAP_WATCH__HTTP_CONCURRENCY + "
                f"{PROBE_SPARE}); try again in a moment, or raise it",
            )

    def bounded(self, app: ASGIApp) -> ASGIApp:
        """``app`` answering 503 past ``concurrency`` requests in progress (probes excepted)."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["path"] in PROBES:
                await app(scope, receive, send)
                return
            if self.in_progress >= self.concurrency:
                busy = JSONResponse(
                    {
                        "error": f"{self.in_progress} requests in progress, the most "
                        "ADRAP_WATCH__HTTP_CONCURRENCY allows; try again in a moment"
                    },
                    status_code=503,
                )
                await busy(scope, receive, send)
                return
            self.in_progress += 1  # the event loop's thread only: no lock
            try:
                await app(scope, receive, send)
            finally:
                self.in_progress -= 1

        return guarded

    def _refuse(self, conn: Any, why: str) -> None:
        body = json.dumps({"error": why}).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        conn.transport.write(head.encode() + body)
        conn.transport.close()
        host = _host(conn)
        now = time.monotonic()
        if now - self._warned.get(host, -WARN_EVERY) >= WARN_EVERY:
            self._warned[host] = now
            log.warning("refused a connection: %s", why)


def _host(conn: Any) -> str:
    client = getattr(conn, "client", None)
    return str(client[0]) if client else "a local socket"


def _close_oldest_idle(conns: list[Any]) -> bool:
    """Close the connection of ``conns`` idle longest; False if none is idle."""
    idle = [c for c in conns if ConnectionGuard.idle(c)]
    if not idle:
        return False
    oldest = min(idle, key=lambda c: getattr(c, "idle_since", 0.0))
    log.debug("closed the oldest idle connection of %s to make room", _host(oldest))
    oldest.transport.close()
    return True
