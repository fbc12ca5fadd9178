"""Structure kept: section paths, locators, chunks that respect headings and table rows, and
extractive summaries that never take a heading, a bullet marker or a table line as a sentence."""

from __future__ import annotations

import pytest

from ingestor.read.chunking import chunk_text
from ingestor.read.documents import normalise_text
from ingestor.read.parts import Part
from ingestor.read.sentences import split_units
from ingestor.read.structure import Outline, join_normalised, merge_locators
from ingestor.summarize.extractive import ExtractiveSummarizer
from testkit.fakes import ByteTokenizer

PROSE = "The committee met on Tuesday to review the annual figures in detail. " * 3


def test_a_section_path_is_the_headings_above_outermost_first() -> None:
    text = "# Budget\n\nIntro.\n\n## Q3\n\nThird quarter.\n\n## Q4\n\nFourth.\n\n# Staff\n\nPeople."
    outline = Outline(text)
    assert outline.section(text.index("Intro")) == "Budget"
    assert outline.section(text.index("Third")) == "Budget > Q3"
    assert outline.section(text.index("## Q4")) == "Budget > Q4"
    assert outline.section(text.index("People")) == "Staff"
    assert Outline("No headings here.").section(3) is None
    nested = "# Harbour\n\n## Maintenance\n\nThe lantern was repainted."
    assert Outline(nested).section(0) == "Harbour"
    assert Outline(nested).section(0, len(nested)) == "Harbour > Maintenance"  # its first text


@pytest.mark.parametrize(
    ("first", "last", "merged"),
    [
        ("page 3", "page 3", "page 3"),
        ("page 3", "page 4", "pages 3-4"),
        ("slide 2", "slide 5", "slides 2-5"),
        ("Budget!A5:D5", "Budget!A9:C9", "Budget!A5:D9"),
        ("'Q3 plan'!B2", "'Q3 plan'!B7", "'Q3 plan'!B2:B7"),
        ("header", "body", "header \u2013 body"),
    ],
)
def test_locators_of_a_span_merge_into_one_name(first: str, last: str, merged: str) -> None:
    assert merge_locators(first, last) == merged


def test_joined_parts_are_normalised_and_regions_point_at_their_text() -> None:
    parts = [
        Part("# Sheet\r\n", "Sheet"),
        Part("| a | b |", "Sheet!A1:B1"),
        Part("| c  | d |  ", "Sheet!A2:B2", continues=True),
        Part("   ", "page 9"),  # empty: no region
        Part("Closing words.\n\n\n\nEnd.", "page 2"),
    ]
    text, regions = join_normalised(parts, normalise_text)
    assert text == normalise_text(text)
    assert [loc for _, loc in regions] == ["Sheet", "Sheet!A1:B1", "Sheet!A2:B2", "page 2"]
    assert text[regions[2][0] :].startswith("| c  | d |")
    assert text[regions[3][0] :].startswith("Closing words.")
    assert Outline(text, regions).locator(regions[1][0], regions[2][0] + 5) == "Sheet!A1:B2"


def test_headings_and_table_rows_are_units_of_their_own() -> None:
    text = "## Costs\n\n| Item | Cost. Note |\n| Tea | 3.50 |\n\n- First point. Second.\n- Third"
    kinds = [(text[s:e], k) for s, e, k in split_units(text)]
    assert kinds == [
        ("## Costs", "heading"),
        ("| Item | Cost. Note |", "row"),
        ("| Tea | 3.50 |", "row"),
        ("- First point.", "text"),
        ("Second.", "text"),
        ("- Third", "text"),
    ]


def test_a_chunk_does_not_straddle_a_heading_whose_section_does_not_fit() -> None:
    text = f"# One\n\n{PROSE}\n\n# Two\n\n{PROSE}{PROSE}"
    chunks = chunk_text(text, max_tokens=300, overlap=40, tokenizer=ByteTokenizer())
    for chunk in chunks:
        assert chunk.text.count("# ") <= 1
        if "# " in chunk.text:
            assert chunk.text.startswith("# ")  # a heading only opens a chunk
    assert any(c.text.startswith("# Two") for c in chunks)


def test_small_sections_share_a_chunk_whole() -> None:
    text = "# A\n\nShort one.\n\n# B\n\nShort two.\n\n# C\n\nShort three."
    (chunk,) = chunk_text(text, max_tokens=200, overlap=20, tokenizer=ByteTokenizer())
    assert chunk.text == text


def test_a_table_row_is_never_split_between_chunks() -> None:
    rows = [f"| row {i} | value {i}. With a period. | more text here |" for i in range(40)]
    text = "# Table\n\n" + "\n".join(rows)
    chunks = chunk_text(text, max_tokens=200, overlap=60, tokenizer=ByteTokenizer())
    assert len(chunks) > 3
    for chunk in chunks:
        for line in chunk.text.split("\n"):
            assert line == "# Table" or not line or line in rows


def test_extractive_summaries_take_no_heading_bullet_marker_or_table_line() -> None:
    texts = [
        "## The Fox and the Grapes\n\nA hungry fox saw grapes hanging high on a vine.",
        "## The Hare and the Tortoise\n\n- The hare mocked the slow tortoise.\n- They raced.",
        "| Fable | Moral |\n| Fox | Sour grapes |",
    ]
    (summary,) = ExtractiveSummarizer().summarize_many([texts], max_tokens=200)
    assert "#" not in summary
    assert "|" not in summary
    assert "- " not in summary
    assert "hungry fox" in summary


def test_a_cluster_of_table_rows_is_summarised_from_its_cells() -> None:
    texts = ["| Region | Sales |\n| North | 120 |", "| South | 95 |"]
    (summary,) = ExtractiveSummarizer().summarize_many([texts], max_tokens=200)
    assert "North; 120" in summary
    assert "|" not in summary
