"""Settings for the embedding backend and the Qdrant cluster, and make_embedder's choice."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from ingestor.cli.factories import make_embedder
from ingestor.config import Settings
from retriever import EmbeddingError


def test_the_openai_backend_and_its_endpoint_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ADRAP_EMBED__BACKEND", "openai")
    monkeypatch.setenv("ADRAP_EMBED__MODEL", "bge-m3")
    monkeypatch.setenv("ADRAP_EMBED__OPENAI__BASE_URL", "http://gpu-box:8000/v1")
    monkeypatch.setenv("ADRAP_EMBED__OPENAI__API_KEY", "sk-embed")
    monkeypatch.setenv("ADRAP_EMBED__OPENAI__CONCURRENCY", "8")
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.embed.backend == "openai"
    assert s.embed.openai.base_url == "http://gpu-box:8000/v1"
    assert s.embed.openai.concurrency == 8
    assert "sk-embed" not in str(s.masked())


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValidationError, match="backend"):
        Settings(_env_file=None, embed={"backend": "tei"})  # type: ignore[call-arg]


def test_make_embedder_with_the_openai_backend_calls_the_server(tmp_path: object) -> None:
    """The openai backend goes over HTTP: an endpoint nobody listens on fails naming the URL."""
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    s = Settings(  # type: ignore[call-arg]
        _env_file=None,
        embed={"backend": "openai", "model": "e5", "openai": {"base_url": url, "max_retries": 0}},
    )
    with pytest.raises(EmbeddingError, match=rf"model 'e5' at {url}/.*ConnectError"):
        make_embedder(s)


def test_write_consistency_above_the_replicas_is_refused() -> None:
    with pytest.raises(ValidationError, match="write_consistency_factor"):
        Settings(  # type: ignore[call-arg]
            _env_file=None, qdrant={"replication_factor": 2, "write_consistency_factor": 3}
        )
    s = Settings(  # type: ignore[call-arg]
        _env_file=None,
        qdrant={"shard_number": 6, "replication_factor": 2, "write_consistency_factor": 2},
    )
    assert (s.qdrant.shard_number, s.qdrant.replication_factor) == (6, 2)


def test_make_store_passes_the_cluster_distribution_to_the_server_store() -> None:
    from ingestor.cli.factories import make_store

    s = Settings(  # type: ignore[call-arg]
        _env_file=None,
        qdrant={
            "url": "http://127.0.0.1:1",  # no request is sent until the store is used
            "shard_number": 3,
            "replication_factor": 2,
            "write_consistency_factor": 1,
        },
    )
    store = make_store(s)
    try:
        assert (store.shard_number, store.replication_factor) == (3, 2)  # type: ignore[attr-defined]
        assert store.write_consistency_factor == 1  # type: ignore[attr-defined]
    finally:
        store.close()
