"""The HTTP door: Host and cross-site checks on every route, POST-only writes, bounded query work.

The app is the real one (``build_app`` over ``daemon_routes``, the dashboard's and the Qdrant
facade's routes) over fakes of the daemon and the store, so every route is reached in a few ms.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from qdrant_client.http import models
from starlette.testclient import TestClient

from ingestor.service.concurrency import LockedStore
from ingestor.service.daemon.routes import daemon_routes
from ingestor.service.dashboard.routes import dashboard_routes
from ingestor.service.deadline import BoundedLock, Deadline, DeadlineExceeded
from ingestor.service.door import Door, split_host
from ingestor.service.http import HttpLimits, build_app
from ingestor.service.qdrant_rest import qdrant_routes

BASE = "http://127.0.0.1:8765"
#: Every route, with a request that reaches it (the facade's collection is "adrap").
ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/", None),
    ("GET", "/healthz", None),
    ("GET", "/readyz", None),
    ("GET", "/metrics", None),
    ("GET", "/status", None),
    ("GET", "/query?q=zebras", None),
    ("POST", "/ask?q=zebras", None),
    ("GET", "/changes?since=2d", None),
    ("POST", "/changes?digest=llm", None),
    ("POST", "/retry", None),
    ("POST", "/confirm-deletions", None),
    ("POST", "/refresh", None),
    ("POST", "/repair", None),
    ("GET", "/dashboard", None),
    ("GET", "/dashboard/api/layers", None),
    ("GET", "/dashboard/api/layer/0", None),
    ("GET", "/dashboard/api/node/n1", None),
    ("GET", "/dashboard/api/children/n1", None),
    ("GET", "/dashboard/api/updates", None),
    ("GET", "/dashboard/api/picture", None),
    ("GET", "/dashboard/api/picture/map/0", None),
    ("GET", "/collections", None),
    ("GET", "/aliases", None),
    ("GET", "/collections/adrap", None),
    ("GET", "/collections/adrap/exists", None),
    ("GET", "/collections/adrap/aliases", None),
    ("POST", "/collections/adrap/points/query", {}),
    ("POST", "/collections/adrap/points/query/batch", {"searches": []}),
    ("POST", "/collections/adrap/points/search", {"vector": [1.0, 0.0]}),
    ("POST", "/collections/adrap/points/search/batch", {"searches": []}),
    ("POST", "/collections/adrap/points/scroll", {}),
    ("POST", "/collections/adrap/points/count", {}),
    ("POST", "/collections/adrap/points", {"ids": [1]}),
    ("GET", "/collections/adrap/points/1", None),
    ("POST", "/collections/adrap/points/recommend", {}),
    ("PUT", "/collections/adrap/points", {}),
]


class FakeDaemon:
    """What ``daemon_routes`` uses of a daemon; records every call that changes or spends."""

    def __init__(self, query: Callable[[dict[str, str]], dict[str, Any]] | None = None) -> None:
        from prometheus_client import CollectorRegistry

        self.ready = True
        self.registry = CollectorRegistry()
        self.changed: list[str] = []
        self.feed = None  # the MCP tools' change log: none
        self._query = query or (lambda params: {"hits": ["the corpus"]})

    def share_problem(self) -> str | None:
        return None

    def status(self, *, offset: int = 0, limit: int = 100, caller: Any = None) -> dict[str, Any]:
        return {"files": 1}

    def query(self, params: dict[str, str], caller: Any = None) -> dict[str, Any]:
        return self._query(params)

    def ask(self, params: dict[str, str], caller: Any = None) -> dict[str, Any]:
        self.changed.append("ask")
        return {"answer": "paid for"}

    def changes(self, params: dict[str, str], caller: Any = None) -> dict[str, Any]:
        if params.get("digest") == "llm":
            self.changed.append("changes-llm")
        return {"records": ["the corpus"]}

    def retry(self, path: str | None = None) -> list[str]:
        self.changed.append("retry")
        return []

    def confirm_deletions(self) -> None:
        self.changed.append("confirm")

    def refresh(self, rewrite: bool = False) -> dict[str, Any]:
        self.changed.append("refresh")
        return {"refreshed": True}

    def repair_now(self, every: bool = False) -> dict[str, Any]:
        self.changed.append("repair")
        return {"summary": "no subtree has drifted past the repair threshold"}


class FakeReader:
    """What the Qdrant facade uses of ``EdgeRestReader``."""

    collection = "adrap"

    def __init__(self, query: Callable[[Any], Any] | None = None) -> None:
        self._query = query or (lambda _req: models.QueryResponse(points=[]))

    def exists(self) -> bool:
        return True

    def info(self, *_: Any) -> dict[str, Any]:
        return {"points_count": 0}

    def query(self, req: Any, *_: Any) -> Any:
        return self._query(req)

    def search(self, req: Any, *_: Any) -> list[Any]:
        return []

    def scroll(self, req: Any, *_: Any) -> models.ScrollResult:
        return models.ScrollResult(points=[], next_page_offset=None)

    def count(self, req: Any, *_: Any) -> models.CountResult:
        return models.CountResult(count=0)

    def retrieve(self, req: Any, *_: Any) -> list[Any]:
        return []

    def facet(self, req: Any, *_: Any) -> models.FacetResponse:
        return models.FacetResponse(hits=[])


def fake_view() -> Any:
    return SimpleNamespace(
        tree="t",
        layers=lambda *_: [{"layer": 0, "count": 1}],
        layer_page=lambda n, limit, offset, *_: {"nodes": []},
        node=lambda node_id, *_: {"node_id": node_id},
        children=lambda node_id, offset, limit, *_: {"children": []},
        store=SimpleNamespace(scroll_fields=lambda flt, fields, limit, offset: ([], None)),
    )


def make_app(
    daemon: FakeDaemon | None = None,
    reader: FakeReader | None = None,
    *,
    host: str = "127.0.0.1",
    allowed_hosts: tuple[str, ...] = (),
    token: str | None = None,
    timeout: float = 30.0,
) -> Any:
    limits = HttpLimits(query_timeout=timeout)
    routes = [
        *daemon_routes(daemon or FakeDaemon(), limits),  # type: ignore[arg-type]
        *dashboard_routes(fake_view(), lambda *_: {"updates": []}),
        *qdrant_routes(
            reader or FakeReader(),  # type: ignore[arg-type]
            root=Path("/docs"),
            limits=limits,
            ready=lambda: True,
        ),
    ]
    return build_app(routes, token, host=host, allowed_hosts=allowed_hosts)


@pytest.fixture
def daemon() -> FakeDaemon:
    return FakeDaemon()


@pytest.fixture
def client(daemon: FakeDaemon) -> Iterator[TestClient]:
    with TestClient(make_app(daemon), base_url=BASE) as c:
        yield c


def send(
    client: TestClient, method: str, path: str, body: Any, headers: dict[str, str] | None = None
) -> Any:
    return client.request(method, path, json=body, headers=headers or {}, follow_redirects=False)


def test_non_browser_clients_reach_every_route(daemon: FakeDaemon) -> None:
    """curl, qdrant-client and the JS client send no Origin: nothing changes for them (with the
    owner's token: retry, confirm, refresh and repair are the owner's actions)."""
    owner = {"Authorization": "Bearer owner-token"}
    with TestClient(make_app(daemon, token="owner-token"), base_url=BASE) as client:
        responses = [
            (path, send(client, method, path, body, owner)) for method, path, body in ROUTES
        ]
    for path, resp in responses:
        assert resp.status_code != 403 or path == "/collections/adrap/points", (path, resp.text)
        assert resp.status_code < 500 or resp.status_code == 501, (path, resp.text)
    assert daemon.changed == ["ask", "changes-llm", "retry", "confirm", "refresh", "repair"]


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://127.0.0.1:9999"},  # another port of this machine
        {"origin": "https://attacker.example"},
        {"origin": "null"},  # a sandboxed frame or a file
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},  # another port of the same host is the same site
        {"origin": "http://127.0.0.1:9999", "sec-fetch-site": "same-site"},
    ],
)
def test_a_cross_site_request_is_refused_on_every_route(
    client: TestClient, daemon: FakeDaemon, headers: dict[str, str]
) -> None:
    for method, path, body in ROUTES:
        resp = send(client, method, path, body, headers)
        assert resp.status_code == 403, (path, resp.status_code, resp.text)
        assert "cross-site request refused" in resp.text
        assert "the corpus" not in resp.text
    assert daemon.changed == [], "a cross-site request changed state or spent tokens"


def test_a_rebound_host_name_is_refused_on_every_route(
    client: TestClient, daemon: FakeDaemon
) -> None:
    """DNS rebinding: the page's own name, re-resolved to 127.0.0.1, is same-origin for the
    browser; only the Host header tells it apart."""
    for host in ("attacker.example:8765", "attacker.example", "127.0.0.1.nip.io:8765", "[::1"):
        for same in ({}, {"origin": f"http://{host}", "sec-fetch-site": "same-origin"}):
            for method, path, body in ROUTES:
                resp = send(client, method, path, body, {"host": host, **same})
                assert resp.status_code == 403, (host, path, resp.status_code)
                assert "ADRAP_WATCH__ALLOWED_HOSTS" in resp.text
    assert daemon.changed == []


def test_the_dashboard_works_from_its_own_origin(client: TestClient) -> None:
    own = {"origin": BASE, "sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"}
    for path in ("/dashboard/api/layers", "/dashboard/api/updates", "/query?q=zebras", "/status"):
        resp = client.get(path, headers=own)
        assert resp.status_code == 200, (path, resp.text)
    page = client.get(
        "/dashboard", headers={"sec-fetch-site": "none", "sec-fetch-mode": "navigate"}
    )
    assert page.status_code == 200
    for host in ("localhost:8765", "[::1]:8765", "127.0.0.1"):
        origin = "http://" + host
        resp = client.get("/status", headers={"host": host, "origin": origin})
        assert resp.status_code == 200, host


def test_a_link_from_another_site_opens_the_page_but_nothing_else(client: TestClient) -> None:
    nav = {
        "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "navigate",
        "sec-fetch-dest": "document",
    }
    assert client.get("/dashboard", headers=nav).status_code == 200
    assert client.get("/status", headers=nav).status_code == 403
    assert client.get("/query?q=x", headers=nav).status_code == 403
    framed = nav | {"sec-fetch-dest": "iframe"}
    assert client.get("/dashboard", headers=framed).status_code == 403


def test_state_changing_and_paying_routes_are_post_only(
    client: TestClient, daemon: FakeDaemon
) -> None:
    for path in ("/ask?q=zebras", "/retry", "/confirm-deletions", "/refresh", "/repair"):
        resp = client.get(path)
        assert resp.status_code == 405, path
        assert "POST" in resp.headers["allow"]
        assert "use POST" in resp.text
    assert daemon.changed == []


def test_allowed_hosts_admit_a_proxys_name_and_its_origin() -> None:
    app = make_app(allowed_hosts=("adrap.example",))
    with TestClient(app, base_url="https://adrap.example") as c:
        assert c.get("/status").status_code == 200
        own = {"origin": "https://adrap.example", "sec-fetch-site": "same-origin"}
        assert c.get("/status", headers=own).status_code == 200
        # the proxy forwards its own Host; the page's Origin is the proxy's name
        forwarded = own | {"host": "127.0.0.1:8765"}
        assert c.get("/status", headers=forwarded).status_code == 200
        assert c.get("/status", headers={"host": "other.example"}).status_code == 403
        assert c.get("/status", headers={"origin": "https://other.example"}).status_code == 403
    with TestClient(make_app(), base_url="https://adrap.example") as c:
        assert c.get("/status").status_code == 403


def test_a_leading_dot_allows_the_subdomains_of_a_name() -> None:
    """A Kubernetes Service is reached by names ending in .svc.cluster.local (one per namespace)."""
    app = make_app(host="0.0.0.0", allowed_hosts=(".svc.cluster.local",))
    with TestClient(app, base_url="http://adrap.team.svc.cluster.local:8765") as c:
        assert c.get("/status").status_code == 200
        assert (
            c.get("/status", headers={"host": "svc.cluster.local.evil.example"}).status_code == 403
        )
        assert (
            c.get("/status", headers={"host": "evil-svc.cluster.local.example"}).status_code == 403
        )


def test_a_wildcard_bind_accepts_ip_addresses_but_not_names() -> None:
    with TestClient(make_app(host="0.0.0.0"), base_url="http://192.168.1.5:8765") as c:
        assert c.get("/status").status_code == 200
        assert c.get("/status", headers={"host": "attacker.example:8765"}).status_code == 403
    with TestClient(make_app(host="127.0.0.1"), base_url="http://192.168.1.5:8765") as c:
        assert c.get("/status").status_code == 403


def test_the_door_comes_before_the_token() -> None:
    """A page that somehow holds the token (a leaked link) still cannot call cross-site."""
    auth = {"authorization": "Bearer s3cret"}
    with TestClient(make_app(token="s3cret"), base_url=BASE) as c:
        assert c.get("/status", headers=auth).status_code == 200
        cross = auth | {"origin": "http://127.0.0.1:9999"}
        assert c.get("/status", headers=cross).status_code == 403


def test_host_headers_parse_or_are_refused() -> None:
    assert split_host("127.0.0.1:8765") == ("127.0.0.1", "8765")
    assert split_host("[::1]:80") == ("::1", "80")
    assert split_host("LocalHost.") == ("localhost", "")
    for bad in ("", ":80", "a:b", "[::1", "[::1]x", "[::1]:"):
        assert split_host(bad) is None, bad
    door = Door("127.0.0.1")
    assert door.refusal("GET", "/status", {}) is None  # no Host: HTTP/1.0, not a browser


# -- timeouts that stop the work -------------------------------------------------------------


class SlowStore:
    """A store whose calls are recorded by the first node id they name; ``delete`` waits
    (holding the store's lock) for ``release``."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = threading.Event()
        self.entered = threading.Event()

    def retrieve(self, node_ids: Sequence[str]) -> list[Any]:
        self.calls.append(node_ids[0])
        return []

    def delete(self, node_ids: Sequence[str]) -> None:
        self.calls.append(node_ids[0])
        self.entered.set()
        if not self.release.wait(30):
            raise AssertionError("never released")


def two_store_calls(store: Any, finished: threading.Event) -> Callable[[Any], Any]:
    def work(_: Any) -> Any:
        try:
            store.delete(["first"])
            store.retrieve(["second"])
            return models.QueryResponse(points=[])
        finally:
            finished.set()

    return work


@pytest.mark.parametrize("route", ["daemon", "facade"])
def test_a_request_past_its_timeout_makes_no_further_store_call(route: str) -> None:
    """The 504 used to leave the worker thread running on, call after call, each taking the
    store lock the writer shares; now it stops at its next store call."""
    inner, finished = SlowStore(), threading.Event()
    store = LockedStore(inner)  # type: ignore[arg-type]
    work = two_store_calls(store, finished)
    daemon = FakeDaemon(query=lambda p: work(p) and {})
    app = make_app(daemon, FakeReader(query=work), timeout=0.2)
    with TestClient(app, base_url=BASE) as c:
        if route == "daemon":
            resp = c.get("/query?q=zebras")
        else:
            resp = c.post("/collections/adrap/points/query", json={})
        assert resp.status_code == 504, resp.text
        inner.release.set()
        assert finished.wait(10), "the worker thread did not end"
    assert inner.calls == ["first"], "the timed-out request went on calling the store"
    assert store._lock.acquire(blocking=False), "the store lock is still held"
    store._lock.release()


def test_a_request_waiting_for_the_writers_lock_gives_up_at_its_timeout() -> None:
    """While the writer holds the store lock, a query waits for it only until its deadline, then
    its thread ends (it no longer queues behind the writer for as long as the writer holds it)."""
    inner, finished = SlowStore(), threading.Event()
    store = LockedStore(inner)  # type: ignore[arg-type]

    def query(_: Any) -> dict[str, Any]:
        try:
            store.retrieve(["query"])
            return {}
        finally:
            finished.set()

    writer = threading.Thread(target=store.delete, args=(["writer"],))
    writer.start()
    try:
        assert inner.entered.wait(10)
        with TestClient(make_app(FakeDaemon(query=query), timeout=0.2), base_url=BASE) as c:
            assert c.get("/query?q=zebras").status_code == 504
            assert finished.wait(10), "the query thread still waits for the writer's lock"
        assert inner.calls == ["writer"]
    finally:
        inner.release.set()
        writer.join(10)


def test_a_bounded_lock_waits_no_longer_than_the_deadline_and_is_plain_without_one() -> None:
    lock = BoundedLock("the query embedder")
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            done.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        with pytest.raises(DeadlineExceeded, match="the query embedder"):
            Deadline(0.05).run(lambda: lock.__enter__())
        cancelled = Deadline(30)
        cancelled.cancel()
        with pytest.raises(DeadlineExceeded):
            cancelled.run(lambda: lock.__enter__())
    finally:
        done.set()
        t.join(10)
    with lock:  # no deadline: an ordinary lock, free again
        pass
