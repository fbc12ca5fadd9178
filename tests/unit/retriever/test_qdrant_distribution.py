"""Collections adrap creates on a cluster carry the configured shard/replica/consistency numbers."""

from __future__ import annotations

from typing import Any
from unittest import mock

from qdrant_client import QdrantClient

from retriever import QdrantNodeStore


def _created(**params: Any) -> list[dict[str, Any]]:
    client = QdrantClient(":memory:")
    # A spy on the real client (local mode accepts these arguments but does not report them back).
    with mock.patch.object(client, "create_collection", wraps=client.create_collection) as spy:
        store = QdrantNodeStore(client, "adrap", **params)
        store.ensure_collection(4, "m")
        store.create_next_generation(4, "m")
    return [call.kwargs for call in spy.call_args_list]


def test_configured_distribution_is_used_for_every_generation() -> None:
    calls = _created(shard_number=6, replication_factor=2, write_consistency_factor=2)
    assert len(calls) == 2  # adrap_v1, then adrap_v2 of a full rebuild
    for kwargs in calls:
        assert kwargs["shard_number"] == 6
        assert kwargs["replication_factor"] == 2
        assert kwargs["write_consistency_factor"] == 2


def test_unset_distribution_leaves_the_server_default() -> None:
    for kwargs in _created():
        assert kwargs["shard_number"] is None
        assert kwargs["replication_factor"] is None
        assert kwargs["write_consistency_factor"] is None
