"""A page on another origin can neither read nor change anything, in a real headless Chromium.

The daemon's real HTTP stack (uvicorn, ``build_app`` with its door, every route: the daemon's,
the dashboard's and the Qdrant facade's) serves over a fake daemon that records every call that
changes state or spends LLM tokens. An attacker page on another 127.0.0.1 port tries fetch, XHR
and form POSTs; a page whose own name is made to resolve to 127.0.0.1 (DNS rebinding, by
Chromium's ``--host-resolver-rules``) tries same-origin reads. The daemon's own page still reads.
Skipped, saying why, where chromium, chromedriver or selenium are missing.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from ingestor.service.http import HttpLimits, HttpServer
from testkit.browser import CHROMEDRIVER, CHROMIUM, HAVE_SELENIUM, chrome
from tests.unit.service.test_http_door import FakeDaemon, make_app

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="needs Debian's chromium and chromium-driver (scripts/install.sh installs them as "
        "root on Debian); absent here",
    ),
    pytest.mark.skipif(
        not HAVE_SELENIUM, reason="needs selenium (pip install -e '.[test]'); absent here"
    ),
]

#: The attacker's page: every way a page can reach another origin without its permission.
ATTACK = """<!doctype html><title>attacker</title>
<iframe name="sink" id="sink"></iframe>
<form id="confirm" method="POST" action="{d}/confirm-deletions" target="sink"></form>
<form id="retry" method="POST" action="{d}/retry" target="sink"></form>
<form id="ask" method="POST" action="{d}/ask?q=spend+tokens" target="sink"></form>
"""


@pytest.fixture
def daemon() -> FakeDaemon:
    return FakeDaemon()


@pytest.fixture
def served(daemon: FakeDaemon) -> Iterator[str]:
    server = HttpServer(make_app(daemon), "127.0.0.1", 0, HttpLimits())
    server.start()
    try:
        yield "http://{}:{}".format(*server.address)
    finally:
        server.stop()


@pytest.fixture
def attacker(served: str) -> Iterator[str]:
    page = ATTACK.format(d=served).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        t.join(10)


@pytest.fixture
def browser() -> Iterator[Any]:
    # the attacker's rebound name
    driver = chrome("--host-resolver-rules=MAP rebind.test 127.0.0.1")
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


#: Run in the page: try each request, report what the page could see of the answer.
PROBE = """
const [base, done] = [arguments[0], arguments[arguments.length - 1]];
const out = {};
async function attempt(name, f) {
  try { const r = await f(); out[name] = r.type === 'opaque' ? 'opaque' : r.status + ' ' + await r.text(); }
  catch (e) { out[name] = 'blocked: ' + e; }
}
function xhr(url) {
  return new Promise(res => {
    const x = new XMLHttpRequest();
    x.open('GET', url);
    x.onload = () => res(x.status + ' ' + x.responseText);
    x.onerror = () => res('blocked: xhr error');
    x.send();
  });
}
(async () => {
  await attempt('query', () => fetch(base + '/query?q=zebras'));
  await attempt('status', () => fetch(base + '/status'));
  await attempt('points', () => fetch(base + '/collections/adrap/points/scroll',
    {method: 'POST', headers: {'content-type': 'application/json'}, body: '{}'}));
  await attempt('layers', () => fetch(base + '/dashboard/api/layers'));
  for (const path of ['/confirm-deletions', '/retry', '/ask?q=spend']) {
    await attempt('post ' + path, () => fetch(base + path, {method: 'POST', mode: 'no-cors'}));
    await attempt('post text ' + path, () => fetch(base + path,
      {method: 'POST', mode: 'no-cors', headers: {'content-type': 'text/plain'}, body: 'x'}));
  }
  out.xhr = await xhr(base + '/query?q=zebras');
  done(out);
})();
"""


def submit_forms(driver: Any) -> None:
    """Submit each form of the attacker's page (a top-level-free POST into an iframe)."""
    for form in ("confirm", "retry", "ask"):
        driver.execute_script(f"document.getElementById('{form}').submit()")
        driver.execute_async_script(
            "const done = arguments[0]; setTimeout(() => done(), 300);"  # let it land
        )


def test_a_page_on_another_port_can_neither_read_nor_change_anything(
    browser: Any, served: str, attacker: str, daemon: FakeDaemon
) -> None:
    browser.get(attacker)
    seen = browser.execute_async_script(PROBE, served)
    for name, got in seen.items():
        assert "the corpus" not in got, (name, got)
        assert got.startswith(("blocked", "opaque")), (name, got)
    submit_forms(browser)
    # The forms' answers went into the iframe: cross-origin, unreadable; the daemon refused them.
    assert daemon.changed == [], f"a cross-site request changed state or spent: {daemon.changed}"


def test_a_rebound_name_reads_nothing_even_same_origin(
    browser: Any, served: str, daemon: FakeDaemon
) -> None:
    """DNS rebinding: rebind.test resolves to 127.0.0.1, so to the browser the daemon *is* the
    page's origin and every answer would be readable; the Host check refuses them all."""
    port = served.rsplit(":", 1)[1]
    rebound = f"http://rebind.test:{port}"
    browser.get(rebound + "/status")
    assert "ADRAP_WATCH__ALLOWED_HOSTS" in browser.page_source
    seen = browser.execute_async_script(PROBE, rebound)
    for name, got in seen.items():
        assert "the corpus" not in got, (name, got)
        assert got.startswith(("403", "blocked", "opaque")), (name, got)
    assert seen["query"].startswith("403")  # readable, and refused
    assert daemon.changed == []


def test_the_daemons_own_page_still_reads(browser: Any, served: str, daemon: FakeDaemon) -> None:
    browser.get(served + "/dashboard")
    seen = browser.execute_async_script(PROBE, served)
    assert seen["query"].startswith("200"), seen
    assert "the corpus" in seen["query"]
    assert seen["layers"].startswith("200"), seen
    # The door lets its own page through; without the owner's token the caller is anonymous
    # (any local user can open the page), and confirming deletions is the owner's action.
    assert seen["post /confirm-deletions"].startswith("403"), seen
    assert "confirm" not in daemon.changed
