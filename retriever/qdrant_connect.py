"""Connecting to a Qdrant server, and what qdrant-client raises (for the server adapters)."""

from __future__ import annotations

import math
from typing import Any, Final

import grpc
import httpx
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from retriever.errors import StoreError

# What qdrant-client raises: HTTP errors, gRPC errors, transport errors, and (local mode)
# ValueError/RuntimeError, e.g. "Collection x not found" or a closed local client.
CLIENT_ERRORS: Final = (
    UnexpectedResponse,
    ResponseHandlingException,
    grpc.RpcError,
    httpx.HTTPError,
    ConnectionError,
    TimeoutError,
    ValueError,
    RuntimeError,
)


def connect(
    url: str,
    api_key: str | None = None,
    *,
    timeout: float = 10.0,
    https: bool | None = None,
    verify: bool | str = True,
    prefer_grpc: bool = False,
) -> QdrantClient:
    """Build a client for a Qdrant server (no request is sent yet).

    Args:
        url: ``http(s)://host:port`` of the server.
        api_key: The server's API key, if it requires one.
        timeout: Request timeout in seconds (rounded up to whole seconds by qdrant-client).
        https: Force TLS on or off (``None``: from the URL scheme).
        verify: TLS verification: True, False, or a CA bundle path (REST only).
        prefer_grpc: Use gRPC (port 6334) for data requests.

    Raises:
        StoreError: the URL is malformed.
    """
    extra: dict[str, Any] = {} if verify is True else {"verify": verify}
    try:
        return QdrantClient(
            url=url,
            api_key=api_key,
            timeout=math.ceil(timeout),
            https=https,
            prefer_grpc=prefer_grpc,
            # The version check runs in a thread and only warns; the first request fails clearly.
            check_compatibility=False,
            **extra,
        )
    except ValueError as exc:
        raise StoreError(f"invalid Qdrant URL {url!r}: {exc}; check ADRAP_QDRANT__URL") from exc
