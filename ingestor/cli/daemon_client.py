"""The one way ``adrap`` commands talk to a running ``adrap watch``: its Unix socket first.

Over the socket the kernel tells the daemon who is asking (``SO_PEERCRED``), so each local user
gets what they may read and the daemon's own account (or root) everything, with no token. Where
there is no socket (a daemon started with ``ADRAP_WATCH__SOCKET=false``), the HTTP address the
daemon wrote into its lock file is used with ``ADRAP_WATCH__HTTP_TOKEN``.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingestor.service.identity import bindable, socket_path

if TYPE_CHECKING:
    from ingestor.config import Settings

__all__ = ["DaemonClient", "DaemonError"]


class DaemonError(Exception):
    """The daemon answered with an error status (``status``, its message in ``detail``)."""

    def __init__(self, status: int, detail: str, where: str) -> None:
        super().__init__(f"{where} answered {status}: {detail}")
        self.status = status
        self.detail = detail


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        name, dir_fd = bindable(self.path)
        try:
            sock.connect(name)
        except OSError:
            sock.close()
            raise
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
        self.sock = sock


@dataclass(frozen=True)
class DaemonClient:
    """A running daemon of one state dir, reached by its socket or its HTTP address.

    Attributes:
        where: the socket path or ``host:port``.
        unix: whether ``where`` is the Unix socket.
        token: the bearer token sent over HTTP (never over the socket: the kernel says who).
        pid: the daemon's pid where the lock file says it (None: unknown, e.g. another account's
            lock file is private).
    """

    where: str
    unix: bool
    token: str | None = None
    pid: int | None = None

    @property
    def who(self) -> str:
        return f"adrap watch (pid {self.pid if self.pid is not None else '?'})"

    @property
    def url(self) -> str:
        return f"unix:{self.where}" if self.unix else f"http://{self.where}"

    @classmethod
    def find(cls, s: Settings, holder: dict[str, Any] | None = None) -> DaemonClient | None:
        """Return the client of the daemon of ``s.state_dir``, or None where none serves.

        Args:
            holder: the lock file's description where the caller read it already.
        """
        from ingestor.service.locking import read_holder

        sock = socket_path(s.state_dir)
        private = False
        try:
            if holder is None:
                holder = read_holder(s.state_dir)
        except PermissionError:  # another account's tree: its socket is the way in
            holder, private = None, True
        pid = holder.get("pid") if holder else None
        serving = holder is not None and holder.get("command") == "watch"
        if _is_socket(sock) and (private or serving):
            return cls(str(sock), True, None, pid)
        if holder and holder.get("command") == "watch" and holder.get("http"):
            token = s.watch.http_token.get_secret_value() if s.watch.http_token else None
            return cls(str(holder["http"]), False, token, pid)
        return None

    def request(
        self,
        method: str,
        route: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float = 600.0,
    ) -> dict[str, Any]:
        """Send ``method route?params`` and return the JSON answer.

        Raises:
            DaemonError: the daemon answered an error status.
            OSError, ValueError: it did not answer, or not with JSON.
        """
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        target = f"{route}?{query}" if query else route
        conn: http.client.HTTPConnection
        if self.unix:
            conn = _UnixConnection(Path(self.where), timeout)
        else:
            host, _, port = self.where.rpartition(":")
            conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
        headers = {"Host": "localhost"} if self.unix else {}
        if self.token is not None and not self.unix:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            conn.request(method, target, body=b"" if method == "POST" else None, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status >= 400:
            raise DaemonError(
                resp.status, body.decode("utf-8", "replace"), f"{self.who} at {self.url}"
            )
        out: dict[str, Any] = json.loads(body)
        return out


def _is_socket(path: Path) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False
