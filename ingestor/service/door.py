"""Who may talk to the daemon's HTTP port: the ``Host`` check (DNS rebinding) and the cross-site check.

A web page the user visits can send requests to ``http://127.0.0.1:8765`` (a form POST needs no
permission), and by DNS rebinding (its own name re-resolved to 127.0.0.1) it can even read the
answers, its requests then being same-origin for the browser. Two checks stop both, on every
route, before the bearer token is looked at:

- **Host**: the request's ``Host`` must name this daemon: ``localhost``, a loopback address, the
  bound host (when bound to ``0.0.0.0``/``::``, any IP address: rebinding always uses a DNS name),
  or one of ``ADRAP_WATCH__ALLOWED_HOSTS`` (names behind a proxy; ``.example.org`` allows its
  subdomains, ``*`` any). A rebound
  page sends its own name, so it is refused.
- **Cross-site**: a request with an ``Origin`` other than the daemon's own (the ``Host`` it was
  sent to, or an allowed host), or with ``Sec-Fetch-Site`` other than ``same-origin``/``none``,
  comes from another site's page and is refused: a browser always sends one of them for a
  cross-site fetch, XHR or form POST. The one exception is a top-level GET navigation to the
  dashboard's page (a link to it from another site): the page holds no data, and what it then
  fetches is same-origin.

Non-browser clients (curl, qdrant-client, the JS client on Node) send neither header, so they are
unaffected; the dashboard, on its own origin, sends ``Sec-Fetch-Site: same-origin``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Final
from urllib.parse import urlsplit

#: Names that always mean this machine (browsers resolve ``localhost`` to loopback themselves).
LOOPBACK_NAMES: Final = frozenset({"localhost"})
#: Addresses a server bound to accepts on every interface.
WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})
#: ``Sec-Fetch-Site`` values of a request the daemon's own page, or the user, made.
OWN_SITES: Final = frozenset({"same-origin", "none"})
#: Pages a link from another site may open (static documents without data).
NAVIGABLE: Final = frozenset({"/", "/dashboard"})
_DEFAULT_PORTS: Final = {"http": "80", "https": "443"}


def split_host(value: str) -> tuple[str, str] | None:
    """Return ``(name, port)`` of a ``Host`` header (``name[:port]``, ``[v6]:port``), lower case,
    the port ``""`` when absent; None if malformed."""
    value = value.strip().lower()
    rest = ""
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    else:
        name, _, port = value.partition(":")
    name = name.rstrip(".")
    if not name or (port and not port.isdigit()) or (rest and not port):
        return None
    return name, port


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


class Door:
    """The Host and cross-site checks of one server (its bound host, the allowed names)."""

    def __init__(self, bound_host: str = "127.0.0.1", allowed_hosts: Iterable[str] = ()) -> None:
        self.bound = bound_host.strip("[]").lower()
        self.allowed = frozenset(h.strip().lower().rstrip(".") for h in allowed_hosts if h.strip())

    def listed(self, name: str) -> bool:
        """Return True if ``name`` is one of the allowed hosts (``.example.org``: its subdomains;
        ``*``: any name)."""
        return (
            "*" in self.allowed
            or name in self.allowed
            or any(a.startswith(".") and name.endswith(a) for a in self.allowed)
        )

    def host_allowed(self, name: str) -> bool:
        """Return True if ``name`` (a host name or address, lower case) names this daemon."""
        if self.listed(name) or name in LOOPBACK_NAMES or name == self.bound:
            return True
        ip = _ip(name)
        return ip is not None and (ip.is_loopback or self.bound in WILDCARDS)

    def refusal(self, method: str, path: str, headers: Mapping[str, str]) -> str | None:
        """Return why a request is refused (403), or None to let it in.

        Args:
            method: the HTTP method.
            path: the request's path.
            headers: its headers, names in lower case.
        """
        host = headers.get("host")
        if host is not None:
            split = split_host(host)
            if split is None or not self.host_allowed(split[0]):
                return (
                    f"Host {host[:100]!r} is not this daemon's name (a page that re-pointed its "
                    "own name at this machine, DNS rebinding, sends its own); use 127.0.0.1 or "
                    "localhost, or list the name in ADRAP_WATCH__ALLOWED_HOSTS (behind a proxy)"
                )
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site", "").strip().lower()
        cross = (origin is not None and not self._own_origin(origin, host)) or (
            site != "" and site not in OWN_SITES
        )
        if not cross:
            return None
        if (
            method in ("GET", "HEAD")
            and path in NAVIGABLE
            and headers.get("sec-fetch-mode", "").lower() == "navigate"
            and headers.get("sec-fetch-dest", "").lower() == "document"
        ):
            return None  # a link from another site to the dashboard's page
        return (
            f"cross-site request refused (Origin {origin!r}, Sec-Fetch-Site {site or None!r}): "
            "the daemon answers its own dashboard and non-browser clients only; open "
            "/dashboard on this address, or list a proxy's name in ADRAP_WATCH__ALLOWED_HOSTS"
        )

    def _own_origin(self, origin: str, host: str | None) -> bool:
        """Return True if ``origin`` is the daemon's own: the address the request was sent to, or
        an allowed host (a proxy that forwards another ``Host``)."""
        try:
            parts = urlsplit(origin.strip())
            name = parts.hostname
            port = parts.port
        except ValueError:
            return False
        if parts.scheme not in _DEFAULT_PORTS or not name:
            return False  # "null" (a sandboxed frame, a file), or not a web origin
        if self.listed(name.rstrip(".")):
            return True
        split = None if host is None else split_host(host)
        if split is None:
            return False
        default = _DEFAULT_PORTS[parts.scheme]
        return split[0] == name.rstrip(".") and (split[1] or default) == str(port or default)
