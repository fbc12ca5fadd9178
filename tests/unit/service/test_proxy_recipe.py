"""The reverse-proxy recipe of docs/security.md, run as written with Debian's Caddy in front of a
daemon: each user logs in to Caddy, which names them to the daemon in the pinned header, and each
is answered with what they may read. The recipe's Caddyfile is read from the docs (only its site
address, users and upstream are filled in), so a recipe that stopped working fails here: the one
in the docs used ``basic_auth``, a directive Debian's Caddy (2.6) does not know.

Needs root (the users are real) and ``caddy`` (scripts/install.sh installs it as root on Debian).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingestor.service.daemon import Daemon
from testkit.servers import free_port
from tests.conftest import wait_until
from tests.unit.service.test_access_doors import GROUP, SECRET, _leaks, _reads, _user, daemon, users

CADDY = shutil.which("caddy")
DOCS = Path(__file__).resolve().parents[3] / "docs" / "security.md"

pytestmark = [
    pytest.mark.skipif(CADDY is None, reason="needs caddy (apt-get install caddy)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make the users"),
]

__all__ = ["daemon", "users"]  # the fixtures, shared with the other doors' tests


def _recipe() -> str:
    found = re.findall(r"```caddyfile\n(.*?)```", DOCS.read_text(), re.S)
    assert len(found) == 1, "docs/security.md holds one caddyfile recipe"
    return str(found[0])


def _hash(password: str) -> str:
    assert CADDY is not None
    out = subprocess.run(
        [CADDY, "hash-password", "--plaintext", password], check=True, capture_output=True
    )
    return out.stdout.decode().strip()


@pytest.fixture
def caddy(daemon: Daemon, tmp_path: Path) -> Iterator[str]:
    """Caddy serving the docs' recipe on a free loopback port, in front of ``daemon``."""
    assert CADDY is not None
    assert daemon.address is not None
    port = free_port()
    text = _recipe()
    logins = "\n".join(f"        {_user(n)} {_hash('pw-' + n)}" for n in ("carol", "bob"))
    filled = [
        (r"^adrap\.example\.org \{", f"{{\n    admin off\n}}\n\nhttp://127.0.0.1:{port} {{"),
        (r"^        alice \S+.*$", logins),
        (r"reverse_proxy 127\.0\.0\.1:8765", f"reverse_proxy 127.0.0.1:{daemon.address[1]}"),
    ]
    for pattern, value in filled:
        text, n = re.subn(pattern, value.replace("\\", "\\\\"), text, flags=re.M)
        assert n == 1, f"the recipe no longer has {pattern!r}: update this test with the docs"
    (tmp_path / "Caddyfile").write_text(text)
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}  # fmt: skip
    log = tmp_path / "caddy.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
        [CADDY, "run", "--config", str(tmp_path / "Caddyfile"), "--adapter", "caddyfile"],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or _get(base, "/healthz")[0] > 0, timeout=30)
        assert proc.poll() is None, log.read_text()
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def _get(base: str, route: str, login: str | None = None, headers: dict[str, str] | None = None,
         password: str | None = None) -> tuple[int, str]:  # fmt: skip
    sent = dict(headers or {})
    if login is not None:
        secret = password or f"pw-{login}"
        sent["Authorization"] = (
            "Basic " + base64.b64encode(f"{_user(login)}:{secret}".encode()).decode()
        )
    try:
        with urllib.request.urlopen(
            urllib.request.Request(base + route, headers=sent), timeout=30
        ) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_the_documented_caddy_recipe_answers_each_login_with_what_it_may_read(
    caddy: str,
) -> None:
    route = "/query?" + urllib.parse.urlencode(
        {"q": f"salary review {SECRET}", "max_tokens": "4000"}
    )
    status, body = _get(caddy, route, "carol")
    assert status == 200, body
    assert _reads(body), f"carol is in {GROUP}: the proxy names her"
    status, body = _get(caddy, route, "bob")
    assert status == 200, body
    assert not _leaks(body), "bob may not read hr/"
    forged = {"X-Forwarded-User": _user("carol")}
    assert not _leaks(_get(caddy, route, "bob", forged)[1]), "the proxy replaces the header"
    assert _get(caddy, route)[0] == 401, "no login: Caddy asks for one"
    assert _get(caddy, route, "carol", password="wrong")[0] == 401
