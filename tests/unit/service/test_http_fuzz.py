"""Fuzzing the HTTP port: generated paths, query strings, JSON bodies and headers against every route.

A real daemon (a built tree on qdrant-edge, the daemon's routes, the dashboard's and the Qdrant
facade's) served by uvicorn on 127.0.0.1. Whatever arrives, the answer is never a 500, never
carries a traceback, and comes within the query timeout (the client gives up a few seconds past
it, which fails the test). Examples are bounded so the module runs in seconds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ingestor.service.http import HttpLimits
from testkit.daemons import make_daemon
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline, write_corpus

TOKEN = "fuzz-token"
TIMEOUT = 3.0  # the daemon's query timeout, seconds
TEMPLATES = [
    "/",
    "/healthz",
    "/readyz",
    "/metrics",
    "/status",
    "/query",
    "/ask",
    "/retry",
    "/confirm-deletions",
    "/refresh",
    "/repair",
    "/dashboard",
    "/dashboard/api/layers",
    "/dashboard/api/layer/{n}",
    "/dashboard/api/node/{s}",
    "/dashboard/api/children/{s}",
    "/dashboard/api/updates",
    "/dashboard/api/picture",
    "/dashboard/api/picture/map/{n}",
    "/collections",
    "/aliases",
    "/collections/{c}",
    "/collections/{c}/exists",
    "/collections/{c}/aliases",
    "/collections/{c}/points/query",
    "/collections/{c}/points/query/batch",
    "/collections/{c}/points/search",
    "/collections/{c}/points/search/batch",
    "/collections/{c}/points/scroll",
    "/collections/{c}/points/count",
    "/collections/{c}/points",
    "/collections/{c}/points/{s}",
    "/collections/{c}/points/recommend",
    "/collections/{c}/index",
    "/snapshots/{s}",
    "/{s}",
]
PARAMS = ["q", "mode", "max_tokens", "top_k", "source", "k0", "base", "limit", "offset", "path"]

segment = st.text(min_size=0, max_size=20).map(lambda s: quote(s, safe=""))
number = st.integers(-(10**30), 10**30).map(str)  # past u64: the ids the engine overflowed on
collection = st.sampled_from(["adrap", "nodes", "x"]) | segment


@st.composite
def paths(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(TEMPLATES))
    return template.format(n=draw(number | segment), s=draw(number | segment), c=draw(collection))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=20,
)
#: Bodies shaped like Qdrant's (so parsing goes deep), any JSON, or raw bytes.
qdrant_keys = st.sampled_from(
    ["query", "vector", "filter", "limit", "offset", "with_payload", "with_vector", "using",
     "searches", "ids", "exact", "params", "score_threshold", "must", "key", "match", "range"]
)  # fmt: skip
bodies = (
    st.none()
    | st.dictionaries(qdrant_keys, json_values, max_size=5).map(json.dumps)
    | json_values.map(json.dumps)
    | st.binary(max_size=200)
)
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
hosts = st.sampled_from(["127.0.0.1", "localhost", "[::1]", "attacker.example"]) | header_text
headers = st.fixed_dictionaries(
    {},
    optional={
        "host": hosts,
        "origin": st.sampled_from(["null", "http://127.0.0.1:1", "https://x.example"])
        | header_text,
        "sec-fetch-site": st.sampled_from(["same-origin", "cross-site", "none", "same-site"])
        | header_text,
        "sec-fetch-mode": st.sampled_from(["navigate", "cors", "no-cors"]) | header_text,
        "sec-fetch-dest": st.sampled_from(["document", "iframe", "empty"]) | header_text,
        "content-type": st.sampled_from(["application/json", "text/plain"]) | header_text,
        "accept": st.sampled_from(["text/html", "application/json", "*/*"]) | header_text,
        "authorization": st.sampled_from([f"Bearer {TOKEN}", "Bearer x", "Basic"]) | header_text,
        "api-key": st.sampled_from([TOKEN, ""]) | header_text,
    },
)
methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("fuzz")
    root = tmp / "docs"
    write_corpus(root, 8)
    p = make_pipeline(tmp)
    p.build(root)
    d = make_daemon(
        p,
        root,
        http_port=0,
        http_token=TOKEN,
        state_dir=tmp / "state",
        limits=HttpLimits(query_timeout=TIMEOUT),
    )
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,), name="test-daemon")
    t.start()
    try:
        wait_until(lambda: d.metrics.ready and d.address is not None, 60, "the daemon's start")
        assert d.address is not None
        yield "http://{}:{}".format(*d.address)
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()


@pytest.fixture
def no_thread_leaks() -> None:
    """The module's daemon outlives each test by design (overrides the autouse guard)."""


@pytest.fixture(scope="module")
def client(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=TIMEOUT + 5) as c:  # past it: a hang, the test fails
        yield c


def check(resp: httpx.Response) -> None:
    assert resp.status_code != 500, resp.text[:500]
    assert resp.status_code < 600
    assert "Traceback" not in resp.text, resp.text[:500]
    assert 'File "' not in resp.text, resp.text[:500]


@settings(
    max_examples=250,
    deadline=None,  # no wall-clock check: the client's timeout catches a hang
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=methods,
    path=paths(),
    params=st.dictionaries(
        st.sampled_from(PARAMS) | st.text(max_size=8), st.text(max_size=30), max_size=5
    ),
    body=bodies,
    extra=st.just({}) | st.just({}) | st.just({}) | headers,  # mostly through the door
)
@example(  # found by this test: a point id past u64 overflowed the engine (500)
    method="GET",
    path="/collections/adrap/points/99999999999999999999999",
    params={},
    body=None,
    extra={},
)
@example(
    method="POST", path="/collections/adrap/points", params={}, body='{"ids": [1e400]}', extra={}
)
@example(
    method="POST",
    path="/collections/adrap/points/scroll",
    params={},
    body='{"offset": 99999999999999999999999}',
    extra={},
)
@example(
    method="POST",
    path="/collections/adrap/points/query",
    params={},
    body='{"query": 99999999999999999999999}',
    extra={},
)
def test_no_request_gets_a_500_a_traceback_or_a_hang(
    client: httpx.Client,
    method: str,
    path: str,
    params: dict[str, str],
    body: str | bytes | None,
    extra: dict[str, str],
) -> None:
    sent = {"authorization": f"Bearer {TOKEN}"} | extra
    try:
        request = client.build_request(method, path, params=params, content=body, headers=sent)
    except (httpx.InvalidURL, httpx.LocalProtocolError, UnicodeEncodeError):
        return  # the client itself would not send it
    try:
        resp = client.send(request)
    except httpx.LocalProtocolError:
        return  # h11 refuses to send it (a header value of only spaces): nothing reached the server
    except httpx.RemoteProtocolError:
        return  # uvicorn's parser refused it (a malformed request line or header): no route ran
    check(resp)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(params=st.dictionaries(st.sampled_from(PARAMS), st.text(max_size=30) | number, max_size=6))
def test_query_parameters_are_answered_or_refused_with_a_reason(
    client: httpx.Client, params: dict[str, str]
) -> None:
    """Every /query answer is 200, or a 4xx/503/504 whose JSON names the problem."""
    params.setdefault("q", "zebras")
    resp = client.get("/query", params=params, headers={"authorization": f"Bearer {TOKEN}"})
    check(resp)
    if resp.status_code != 200:
        assert resp.status_code in (400, 503, 504), resp.text
        assert json.loads(resp.text)["error"]
