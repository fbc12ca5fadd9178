"""The daemon's HTTP API on starlette + uvicorn: routes, limits, the bearer token, the server thread.

Routes (``build_app`` takes a list, so other routers, e.g. the read-only Qdrant facade of
:mod:`ingestor.service.qdrant_rest` or a dashboard, are mounted beside them):

- ``GET /healthz``: 200 while the process runs (no token needed).
- ``GET /readyz``: 200 once start-up reconciliation is done, 503 before (no token needed); the
  body names a missing or hung watched folder (queries are still answered from the kept tree).
- ``GET /metrics``: Prometheus exposition (``prometheus-client``, a registry of the daemon's own).
- ``GET /status``: JSON: tree stats, pending events, quarantine, share guard, the last update.
- ``GET /query?q=...&mode=...&max_tokens=N&top_k=N&source=...``: the JSON of ``adrap query --json``
  (``mode=postqfrap`` with ``k0`` and ``base`` too).
- ``POST /ask?q=...`` (the same parameters): the JSON of ``adrap ask --json`` (POST only: it
  spends LLM tokens, and a browser sends no cross-site POST that the door lets in).
- ``POST /retry?path=...``: release quarantined files (all, or those under ``path``).
- ``POST /confirm-deletions``: let a held bulk deletion through.
- ``GET /dashboard`` and ``/dashboard/api/...``: the web page of the tree
  (:mod:`ingestor.service.dashboard.routes`; the page itself needs no token, its data does).
- ``POST /mcp``: MCP's streamable HTTP transport, the tree's tools for agents
  (:mod:`ingestor.service.mcp_http`).

Door (:mod:`ingestor.service.door`), on every route before the token: a ``Host`` that does not
name this daemon (DNS rebinding) and a cross-site browser request are refused (403).

Auth: with a token set, every route but /healthz and /readyz needs it, as
``Authorization: Bearer <token>`` or as ``api-key: <token>`` (the header Qdrant clients send).

Limits: request bodies over ``MAX_BODY`` bytes are refused (413); ``max_tokens`` and ``top_k`` are
bounded by settings (400 beyond); a query gets ``query_timeout`` seconds (504 after), and its work
stops then too (:mod:`ingestor.service.deadline`: it takes no further lock); requests in progress
are capped (``concurrency``, 503 beyond, /healthz and /readyz always answered), a connection
without a complete request head is closed after ``head_timeout`` s, and one client address holds
at most ``per_client`` connections (:mod:`ingestor.service.http_connections`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ingestor.config import WatchSettings, default_of
from ingestor.errors import ConfigError
from ingestor.read.access_classes import ANONYMOUS, Identity
from ingestor.service.deadline import Deadline
from ingestor.service.door import Door
from ingestor.service.http_connections import PROBE_SPARE, ConnectionGuard
from ingestor.service.identity import CALLER_KEY, PEER_KEY, Callers, bindable

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Largest request body accepted, bytes (the API takes parameters, not documents).
MAX_BODY = 64 * 1024
#: Paths served without the bearer token: container health checks, the dashboard page (a
#: static document with no tree data; its script sends the token on every data request) and
#: ``/`` (Qdrant's title and version, as Qdrant serves it; a browser is sent to the dashboard).
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/dashboard"})


@dataclass(frozen=True)
class HttpLimits:
    """Bounds of the HTTP API (settings ``ADRAP_WATCH__HTTP_*``) and the names it answers to;
    :meth:`of` reads them from the settings; the defaults are the settings' own."""

    max_tokens: int = default_of(WatchSettings, "http_max_tokens")
    max_top_k: int = default_of(WatchSettings, "http_max_top_k")
    query_timeout: float = default_of(WatchSettings, "http_query_timeout")
    concurrency: int = default_of(WatchSettings, "http_concurrency")
    #: Seconds a connection may take to send a complete request head, then it is closed.
    head_timeout: float = default_of(WatchSettings, "http_head_timeout")
    #: Connections one client address may hold (its oldest idle one is closed past it).
    per_client: int = default_of(WatchSettings, "http_per_client")
    #: ``Host`` names accepted besides loopback and the bound host (``ADRAP_WATCH__ALLOWED_HOSTS``).
    allowed_hosts: tuple[str, ...] = ()
    keep_alive: int = 5

    @classmethod
    def of(cls, w: WatchSettings) -> HttpLimits:
        """Return the limits of the watch settings ``w``."""
        return cls(
            max_tokens=w.http_max_tokens,
            max_top_k=w.http_max_top_k,
            query_timeout=w.http_query_timeout,
            concurrency=w.http_concurrency,
            head_timeout=w.http_head_timeout,
            per_client=w.http_per_client,
            allowed_hosts=tuple(w.allowed_hosts),
        )


def is_loopback(host: str) -> bool:
    """Return True if ``host`` binds only the local machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token_off_loopback(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a bearer token.

    Raises:
        ConfigError: ``host`` is not a loopback address and no token is set.
    """
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve HTTP on {host!r} without a bearer token: anyone who can reach it "
            "could read the documents; set ADRAP_WATCH__HTTP_TOKEN (or the secret file "
            "/run/secrets/adrap_watch__http_token), or bind ADRAP_WATCH__HTTP_HOST=127.0.0.1"
        )


class GuardMiddleware:
    """Pure-ASGI checks before any route: Host and cross-site (``door``), size, the token, then
    who the caller is (:class:`~ingestor.service.identity.Callers`), left in the scope under
    ``CALLER_KEY`` for the routes: every door's one filter starts from it.

    ``token`` (``ADRAP_WATCH__HTTP_TOKEN``) is required from every request but the open paths
    and the Unix socket's; without it a request with no token is anonymous, and one with a
    token that is none of the known ones is refused (401).
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        door: Door | None = None,
        callers: Callers | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self.door = door or Door()
        self.callers = callers or Callers(owner_token=token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self.door.refusal(scope["method"], scope["path"], headers)
        if refused is not None:
            await error_response(403, refused)(scope, receive, send)
            return
        length = headers.get("content-length")
        if (length is not None and (not length.isdigit() or int(length) > MAX_BODY)) or (
            length is None and "chunked" in headers.get("transfer-encoding", "")
        ):
            await error_response(413, f"request body over {MAX_BODY} bytes")(scope, receive, send)
            return
        caller = self.callers.identify(scope, headers)
        sent = "authorization" in headers or "api-key" in headers
        if scope["path"] not in OPEN_PATHS and (
            caller is None or (self.token is not None and not sent and scope.get(PEER_KEY) is None)
        ):
            resp = error_response(
                401,
                "missing or wrong token: send `Authorization: Bearer <token>` (or "
                "`api-key: <token>`, as Qdrant clients do): the daemon's "
                "ADRAP_WATCH__HTTP_TOKEN or a token of `adrap token add`",
            )
            resp.headers["WWW-Authenticate"] = "Bearer"
            await resp(scope, receive, send)
            return
        scope[CALLER_KEY] = caller or ANONYMOUS
        await self.app(scope, receive, send)


def caller_of(scope: Scope) -> Identity:
    """Return the caller the door identified (anonymous where no door ran)."""
    found = scope.get(CALLER_KEY)
    return found if isinstance(found, Identity) else ANONYMOUS


def error_response(code: int, message: str) -> JSONResponse:
    """A JSON error: ``{"error": message}`` with status ``code``."""
    return JSONResponse({"error": message}, status_code=code)


async def run_bounded(fn: Callable[[], T], timeout: float) -> T:
    """Run ``fn`` in a worker thread under a :class:`Deadline` of ``timeout`` seconds.

    At the timeout the caller gets :class:`TimeoutError` at once and the deadline is cancelled, so
    the thread stops at its next lock instead of running on (a thread cannot be killed).

    Raises:
        TimeoutError: the timeout passed (in the caller, or in the thread at a lock).
    """
    deadline = Deadline(timeout)
    try:
        with anyio.fail_after(timeout):
            return await anyio.to_thread.run_sync(partial(deadline.run, fn), abandon_on_cancel=True)
    finally:
        deadline.cancel()  # done, timed out or the client went away: take no further lock


def build_app(
    routes: Sequence[BaseRoute],
    token: str | None,
    *,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
    callers: Callers | None = None,
) -> Starlette:
    """Build the ASGI app from ``routes`` (the daemon's, plus any mounted by others).

    Args:
        routes: every route served.
        token: the bearer token, or None.
        host: the bound host (a ``Host`` naming it is accepted, see :class:`Door`).
        allowed_hosts: more names accepted as ``Host`` (a proxy's).
        callers: who a request is (default: the owner by ``token``, anyone else anonymous).
    """

    async def not_found(request: Request, _exc: Exception) -> Response:
        names = " ".join(r.path for r in routes if isinstance(r, Route))
        return PlainTextResponse(f"not found; try {names}\n", status_code=404)

    async def not_allowed(request: Request, exc: Exception) -> Response:
        allow = getattr(exc, "headers", None) or {}
        methods = allow.get("Allow", "")
        return PlainTextResponse(
            f"{request.method} is not allowed on {request.url.path}; use {methods}\n",
            status_code=405,
            headers={"Allow": methods} if methods else None,
        )

    return Starlette(
        routes=list(routes),
        middleware=[
            Middleware(
                GuardMiddleware, token=token, door=Door(host, allowed_hosts), callers=callers
            ),
        ],
        exception_handlers={404: not_found, 405: not_allowed},
    )


class HttpServer:
    """uvicorn serving ``app`` in a thread; the socket is bound at construction (port 0 works)."""

    def __init__(self, app: ASGIApp, host: str, port: int, limits: HttpLimits) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP
        # (accepted ones inherit it); with proto 0, Nagle + delayed ACK stall every response on a
        # kept-alive connection by ~40 ms.
        self.sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
            self.sock.listen(2048)  # connections queue until uvicorn accepts them
        except OSError as exc:
            self.sock.close()
            raise ConfigError(
                f"cannot serve HTTP on {host}:{port} ({exc.strerror or exc}); choose another "
                "ADRAP_WATCH__HTTP_PORT (0: any free port, -1: no HTTP)"
            ) from exc
        name = self.sock.getsockname()
        self.address: tuple[str, int] = (str(name[0]), int(name[1]))
        guard = ConnectionGuard(limits.concurrency, limits.head_timeout, limits.per_client)
        self._served = _Served(app, self.sock, guard.protocol(), limits.keep_alive, "adrap-http")
        self.server = self._served.server  # uvicorn's: its state (connections) for the tests

    def start(self) -> None:
        self._served.start()

    def stop(self) -> None:
        self._served.stop()


class _Served:
    """uvicorn serving ``app`` on a bound, listening ``sock`` in a thread of its own."""

    def __init__(
        self, app: ASGIApp, sock: socket.socket, protocol: type, keep_alive: int, name: str
    ) -> None:
        import uvicorn

        self.sock = sock
        config = uvicorn.Config(
            app,
            http=protocol,  # idle connections timed out, capped per client (ConnectionGuard)
            log_config=None,  # our logging, configured by the CLI
            log_level="warning",  # each server's "Started server process": our own line says it
            access_log=False,
            limit_concurrency=None,  # requests in progress, not connections: the guard's
            timeout_keep_alive=keep_alive,
            timeout_graceful_shutdown=5,
            lifespan="off",
            server_header=False,
            h11_max_incomplete_event_size=16 * 1024,  # request line + headers
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def _serve(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(15)
        self.sock.close()


def _peer_protocol() -> type:
    """uvicorn's h11 protocol, telling each request's app who is at the other end of the socket
    (``SO_PEERCRED``, under :data:`~ingestor.service.identity.PEER_KEY`)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from ingestor.service.identity import peer_credentials

    class PeerProtocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            peer = peer_credentials(sock)
            inner = self.app

            async def app(scope: Scope, receive: Receive, send: Send) -> None:
                scope[PEER_KEY] = peer
                await inner(scope, receive, send)

            self.app = app

    return PeerProtocol


class UnixHttpServer:
    """The same app on a Unix socket (``adrap`` commands): the kernel tells who connects.

    The socket file may be opened by every local user (mode 0666): what each may read is
    decided by who they are, not by whether they can connect; its folder must let them reach it
    (the state dir is 0711: others may pass through it, not list it).
    """

    def __init__(self, app: ASGIApp, path: Path, limits: HttpLimits) -> None:
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()  # a dead daemon's: the writer lock says no other one runs
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name, dir_fd = bindable(path)
        try:
            self.sock.bind(name)
            os.chmod(path, 0o666)
            self.sock.listen(256)
        except OSError as exc:
            self.sock.close()
            raise ConfigError(
                f"cannot serve on the Unix socket {path} ({exc.strerror or exc}); check that the "
                "state dir is writable by the daemon's account"
            ) from exc
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
        local = limits.concurrency + PROBE_SPARE  # one address: every local caller
        guard = ConnectionGuard(limits.concurrency, limits.head_timeout, local)
        protocol = guard.protocol(_peer_protocol())
        self._served = _Served(app, self.sock, protocol, limits.keep_alive, "adrap-unix")

    def start(self) -> None:
        self._served.start()

    def stop(self) -> None:
        self._served.stop()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
