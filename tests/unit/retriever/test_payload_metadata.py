"""Each point's ``metadata`` object (LangChain's document metadata) is derived from its fields."""

from __future__ import annotations

from typing import Any

from retriever import F, Kind, NodePayload


def leaf(**extra: Any) -> NodePayload:
    return NodePayload(
        node_id="n1",
        tree="t",
        layer=0,
        kind=Kind.CHUNK,
        text="Budget for Q3.",
        n_tokens=4,
        content_hash="h",
        source="reports/q3.xlsx",
        sources=("reports/q3.xlsx",),
        char_start=10,
        char_end=24,
        embed_model="m",
        updated_at=1.0,
        **extra,
    )


def test_a_leaf_payload_carries_file_span_layer_section_and_locator_but_no_text() -> None:
    payload = leaf(section="Budget > Q3", locator="Budget!A5:D9").to_payload()
    assert payload[F.METADATA] == {
        "layer": 0,
        "kind": "chunk",
        "file": "reports/q3.xlsx",
        "span": [10, 24],
        "section": "Budget > Q3",
        "locator": "Budget!A5:D9",
    }


def test_a_summary_says_its_layer_and_leaves_unknown_places_out() -> None:
    summary = leaf().model_copy(
        update={
            "layer": 2,
            "kind": Kind.SUMMARY,
            "source": None,
            "char_start": None,
            "char_end": None,
        }
    )
    assert summary.to_payload()[F.METADATA] == {"layer": 2, "kind": "summary"}


def test_payloads_read_back_with_the_metadata_object_and_without_it() -> None:
    """Points written before the object existed still read; the object itself is not a field."""
    node = leaf(section="S")
    payload = node.to_payload()
    assert NodePayload.from_payload(payload) == node
    old = {k: v for k, v in payload.items() if k != F.METADATA}
    assert NodePayload.from_payload(old) == node
    assert F.METADATA in payload  # from_payload did not modify the caller's dict
