"""Who is asking: every door of the daemon turns a request into an :class:`Identity`.

- **The Unix socket** (``<state dir>/daemon.sock``, what ``adrap`` commands use): the kernel says
  who connected (``SO_PEERCRED``); the daemon's own account and root are the tree's owner.
- **A named token** (``adrap token add NAME --user alice``), sent as ``Authorization: Bearer``
  or ``api-key`` (Qdrant clients): the user or group it was issued for. Tokens are kept as
  sha256 digests (``tokens.json`` in the state dir, private to the daemon's account), listed and
  revoked by name.
- **The owner's token** (``ADRAP_WATCH__HTTP_TOKEN``, or the one the daemon makes at start and
  prints as a link for its owner's browser): the tree's owner.
- **A trusted header** from an authenticating reverse proxy (opt-in: ``ADRAP_ACCESS__PROXY_HEADER``
  and the proxy's addresses pinned in ``ADRAP_ACCESS__PROXY_ADDRESSES``): the user it names. The
  header from any other address is ignored.
- **Anyone else** (no token, on loopback too: every local user can reach 127.0.0.1) is
  :data:`~ingestor.read.permissions.ANONYMOUS`, who reads world-readable files only.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import pwd
import secrets
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ingestor.read.access_classes import ANONYMOUS, UNRESTRICTED, Identity

log = logging.getLogger(__name__)

__all__ = [
    "PEER_KEY",
    "PUBLIC_STATUS",
    "SOCKET_FILE",
    "TOKENS_FILE",
    "Callers",
    "TokenBook",
    "bindable",
    "identity_of_principal",
    "peer_credentials",
    "public_status",
    "socket_path",
]

#: The daemon's Unix socket, in the state dir.
SOCKET_FILE: Final = "daemon.sock"
#: The named tokens, in the state dir.
TOKENS_FILE: Final = "tokens.json"
#: The ASGI scope key the Unix socket's server sets to the peer's ``(pid, uid, gid, groups)``
#: (:func:`peer_credentials`); no request can set it (it is not a header).
PEER_KEY: Final = "adrap.peer"
#: Linux's ``SO_PEERGROUPS`` (``asm-generic/socket.h``; Python's socket module lacks the name).
SO_PEERGROUPS: Final = 59
#: The most one ``getsockopt`` reads in Python: 256 groups.
PEERGROUPS_BYTES: Final = 1024
#: The ASGI scope key under which the door leaves the caller's identity for the routes.
CALLER_KEY: Final = "adrap.caller"


def socket_path(state_dir: Path) -> Path:
    """Return the daemon's Unix socket path in ``state_dir``."""
    return state_dir / SOCKET_FILE


def bindable(path: Path) -> tuple[str, int | None]:
    """Return a name for ``path`` short enough for a Unix socket (108 bytes), and the folder's
    descriptor it goes through (``/proc/self/fd/N/…``) where the path is longer; close it after."""
    if len(os.fsencode(path)) < 100:
        return str(path), None
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{path.name}", fd


def peer_credentials(sock: socket.socket) -> tuple[int, int, int, frozenset[int] | None]:
    """Return ``(pid, uid, gid, groups)`` of the process at the other end of a Unix socket:
    ``groups`` are the supplementary groups it held when it connected (``SO_PEERGROUPS``; None
    where the kernel cannot say: not Linux ≥ 4.13, or more groups than one read holds)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid, _peer_groups(sock)


def _peer_groups(sock: socket.socket) -> frozenset[int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, PEERGROUPS_BYTES)
    except OSError:  # ERANGE: more groups than fit; ENOPROTOOPT: a kernel before 4.13
        return None
    return frozenset(struct.unpack(f"{len(raw) // 4}I", raw))


def identity_of_principal(principal: str) -> Identity:
    """Return the identity of ``user:NAME``, ``group:NAME`` or ``owner``.

    Raises:
        ValueError: another form, or an unknown user or group (the message says which).
    """
    kind, _, name = principal.partition(":")
    try:
        if kind == "user" and name:
            return Identity.of_user(name)
        if kind == "group" and name:
            return Identity.of_group(name)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    if principal == "owner":
        return UNRESTRICTED
    raise ValueError(
        f"principal {principal!r} is not user:NAME, group:NAME or owner (e.g. user:alice)"
    )


@dataclass(frozen=True)
class TokenEntry:
    name: str
    digest: str
    principal: str
    created: float


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenBook:
    """Named tokens, each for one principal, kept hashed in a file private to the daemon's account.

    The file is read again when it changes, so ``adrap token add``/``revoke`` take effect on a
    running daemon at its next request.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: dict[str, TokenEntry] = {}
        self._seen: tuple[int, int] | None = None

    def entries(self) -> list[TokenEntry]:
        """Return every token's entry (digests, never the tokens)."""
        self._reload()
        return sorted(self._entries.values(), key=lambda e: e.name)

    def add(self, name: str, principal: str) -> str:
        """Issue a token named ``name`` for ``principal``; return it (shown once, kept hashed).

        Raises:
            ValueError: the name is taken or empty, or the principal is unknown.
        """
        identity_of_principal(principal)  # refuse an unknown user or group now
        if not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"token name {name!r} must be letters, digits, '-', '_' or '.'")
        with self._lock:
            self._reload()
            if name in self._entries:
                raise ValueError(
                    f"a token named {name!r} exists; revoke it first (adrap token revoke {name})"
                )
            token = "adrap_" + secrets.token_urlsafe(32)
            self._entries[name] = TokenEntry(name, _digest(token), principal, time.time())
            self._save()
        return token

    def revoke(self, name: str) -> bool:
        """Revoke the token ``name``; return whether there was one."""
        with self._lock:
            self._reload()
            found = self._entries.pop(name, None) is not None
            if found:
                self._save()
        return found

    def lookup(self, token: str) -> TokenEntry | None:
        """Return the entry of ``token``, or None."""
        self._reload()
        digest = _digest(token)
        for entry in self._entries.values():
            if hmac.compare_digest(entry.digest, digest):
                return entry
        return None

    def _reload(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._entries, self._seen = {}, None
            return
        seen = (st.st_mtime_ns, st.st_size)
        if seen == self._seen:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self._entries = {d["name"]: TokenEntry(**d) for d in data}
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ValueError(
                f"cannot read the token file {self.path}: {exc}; remove it and issue the tokens "
                "again (adrap token add)"
            ) from exc
        self._seen = seen

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump([e.__dict__ for e in self._entries.values()], f, indent=1)
        os.replace(tmp, self.path)
        self._seen = None


class Callers:
    """Turns a request into the caller's identity, the same way at every door.

    Args:
        owner_token: the token of the tree's owner (None: none).
        tokens: the named tokens (None: none).
        proxy_header: the trusted header naming the user (None: off).
        proxy_addresses: the proxy's addresses or networks; the header counts only from them.
        owner_uid: the daemon's account (its Unix socket peer is the owner).
    """

    def __init__(
        self,
        owner_token: str | None = None,
        tokens: TokenBook | None = None,
        *,
        proxy_header: str | None = None,
        proxy_addresses: Iterable[str] = (),
        owner_uid: int | None = None,
    ) -> None:
        self.owner_token = owner_token
        self.tokens = tokens
        self.proxy_header = proxy_header.lower() if proxy_header else None
        self.proxy_networks = tuple(
            ipaddress.ip_network(a.strip(), strict=False) for a in proxy_addresses if a.strip()
        )
        if self.proxy_header and not self.proxy_networks:
            raise ValueError(
                "ADRAP_ACCESS__PROXY_HEADER is set but ADRAP_ACCESS__PROXY_ADDRESSES is empty: "
                "anyone could send the header; pin the proxy's address (e.g. 127.0.0.1)"
            )
        self.owner_uid = os.getuid() if owner_uid is None else owner_uid

    @property
    def needs_token(self) -> bool:
        """Whether any token is known (a request with a wrong one is refused, 401)."""
        return self.owner_token is not None or self.tokens is not None

    def identify(self, scope: Mapping[str, Any], headers: Mapping[str, str]) -> Identity | None:
        """Return the caller of a request; None: it sent a token that is not one (401).

        Args:
            scope: the ASGI scope (the Unix socket's peer, the client address).
            headers: the request's headers, names in lower case.
        """
        peer = scope.get(PEER_KEY)
        if peer is not None:
            _, uid, gid, groups = peer
            if uid in (0, self.owner_uid):
                return UNRESTRICTED
            return Identity.of_peer(uid, gid, groups)
        token = _sent_token(headers)
        if token:
            if self.owner_token is not None and hmac.compare_digest(
                token.encode(), self.owner_token.encode()
            ):
                return UNRESTRICTED
            entry = None if self.tokens is None else self.tokens.lookup(token)
            if entry is None:
                return None
            try:
                return identity_of_principal(entry.principal)
            except ValueError as exc:  # the user or group left the system since
                log.warning("token %r: %s; answering it as anonymous", entry.name, exc)
                return ANONYMOUS
        if self.proxy_header is not None:
            client = scope.get("client")
            if client and self._from_proxy(client[0]):
                return self._proxy_user(scope)
        return ANONYMOUS

    def _proxy_user(self, scope: Mapping[str, Any]) -> Identity:
        """The user the pinned proxy's header names: one account name, as the machine knows
        it. Anonymous for a header sent twice or holding a list (which one the proxy vouched
        for cannot be told), a number (not a uid: a proxy's user called "1001" is not uid
        1001), an unknown name, root or the daemon's own account (the owner uses the owner's
        token)."""
        key = (self.proxy_header or "").encode("latin-1")
        sent = [
            v.decode("latin-1").strip() for k, v in scope.get("headers", ()) if k.lower() == key
        ]
        if not sent or not sent[0]:
            return ANONYMOUS
        name = sent[0]
        why = None
        if len(sent) > 1 or "," in name:
            why = "more than one user"
        elif name.isdigit():
            why = "a number, not an account name"
        else:
            try:
                uid = pwd.getpwnam(name).pw_uid
            except KeyError:
                why = "no such account here"
            else:
                if uid in (0, self.owner_uid):
                    why = "root or the daemon's account (the owner uses the owner's token)"
                else:
                    return Identity.of_uid(uid)
        log.info("the proxy's %s header %r names %s: anonymous", self.proxy_header, sent[:2], why)
        return ANONYMOUS

    def _from_proxy(self, host: str) -> bool:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(ip in net for net in self.proxy_networks)


def _sent_token(headers: Mapping[str, str]) -> str:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    return headers.get("api-key", "").strip()


#: What ``/status`` tells a caller who is not the tree's owner: counts and health, no file names.
PUBLIC_STATUS = (
    "tree",
    "ready",
    "uptime_seconds",
    "documents",
    "leaves",
    "nodes_per_layer",
    "pending_events",
    "updates_applied",
    "summary_calls",
    "summary_tokens",
    "summary_input_tokens",
    "summaries_deferred",
    "summaries_tolerated",
    "summary_refreshes",
    "stale_summaries",
    "summaries",
    "last_update",
    "errors",
    "caller",
    "access",
)


def public_status(out: dict[str, Any]) -> dict[str, Any]:
    """Return the keys of ``/status``'s document ``out`` a caller who is not the owner sees."""
    return {k: out[k] for k in PUBLIC_STATUS if k in out}
