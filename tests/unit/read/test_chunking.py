"""Chunking: sentence splitting, packing, overlap, and the invariants citations rely on."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestor.read.chunking import Chunk, chunk_text
from ingestor.read.documents import normalise_text
from ingestor.read.sentences import split_sentences
from ingestor.read.tokens import Tokenizer, default_tokenizer
from testkit.fakes import ByteTokenizer
from tests.conftest import DATA

BYTES = ByteTokenizer()
CINDERELLA = DATA / "cinderella" / "cinderella.txt"


def sentences_of(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text)]


def assert_chunk_invariants(
    text: str, chunks: list[Chunk], max_tokens: int, overlap: int, tok: Tokenizer
) -> None:
    """Check everything a caller may rely on, for any text."""
    covered = bytearray(len(text))
    for i, c in enumerate(chunks):
        assert c.index == i
        assert text[c.char_start : c.char_end] == c.text
        assert c.text == c.text.strip()
        assert c.n_tokens == len(tok.encode(c.text)) <= max_tokens
        assert "\ufffd" not in c.text or "\ufffd" in text
        covered[c.char_start : c.char_end] = b"\x01" * (c.char_end - c.char_start)
    assert all(covered[k] or ch.isspace() for k, ch in enumerate(text))
    for a, b in pairwise(chunks):
        assert a.char_start < b.char_start
        assert a.char_end < b.char_end
        if b.char_start < a.char_end:
            assert len(tok.encode(text[b.char_start : a.char_end])) <= overlap


# Sentence splitting ------------------------------------------------------------------------------


def test_sentences_end_at_terminal_punctuation_followed_by_space() -> None:
    assert sentences_of("It rained. Did it? Yes! Then it stopped…  Done") == [
        "It rained.",
        "Did it?",
        "Yes!",
        "Then it stopped…",
        "Done",
    ]


def test_abbreviations_initials_and_decimals_do_not_end_a_sentence() -> None:
    text = (
        "Mr. Smith met Dr. Jones at St. Mary's, e.g. on Sunday. "
        "J. R. R. Tolkien paid 3.14 dollars, i.e. not much. See Fig. 3 and No. 5 in the U.S. today."
    )
    assert sentences_of(text) == [
        "Mr. Smith met Dr. Jones at St. Mary's, e.g. on Sunday.",
        "J. R. R. Tolkien paid 3.14 dollars, i.e. not much.",
        "See Fig. 3 and No. 5 in the U.S. today.",
    ]


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    text = '"Is it late?" she asked. He said "No." (It was.) \u201cFine.\u201d Next.'
    assert sentences_of(text) == [
        '"Is it late?" she asked.',
        'He said "No."',
        "(It was.)",
        "\u201cFine.\u201d",
        "Next.",
    ]


def test_paragraph_break_always_ends_a_sentence_but_a_single_newline_does_not() -> None:
    text = "A heading\n\nfirst line\nsecond line. Last"
    assert sentences_of(text) == ["A heading", "first line\nsecond line.", "Last"]


def test_enumerators_and_etc_are_handled() -> None:
    assert sentences_of(
        "1. Preheat the oven. 2. Mix flour, eggs, etc. and bake. Apples etc. Then"
    ) == [
        "1. Preheat the oven.",
        "2. Mix flour, eggs, etc. and bake.",
        "Apples etc.",
        "Then",
    ]


def test_cjk_full_stops_end_sentences_without_a_space() -> None:
    bang, query = "\uff01", "\uff1f"  # fullwidth ! and ?
    text = f"你好。我很好{bang}谢谢{query}"
    assert sentences_of(text) == ["你好。", f"我很好{bang}", f"谢谢{query}"]


@given(st.text(alphabet=st.sampled_from(list("ab .!?\n\t\"')。e.gMr")), max_size=120))
def test_sentence_spans_are_ordered_trimmed_and_cover_every_visible_character(text: str) -> None:
    spans = split_sentences(text)
    covered = bytearray(len(text))
    previous_end = 0
    for s, e in spans:
        assert previous_end <= s < e
        assert not text[s].isspace()
        assert not text[e - 1].isspace()
        covered[s:e] = b"\x01" * (e - s)
        previous_end = e
    assert all(covered[k] or ch.isspace() for k, ch in enumerate(text))


# Chunking: examples ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n"])
def test_blank_text_gives_no_chunks(text: str) -> None:
    assert chunk_text(text, tokenizer=BYTES) == []


@pytest.mark.parametrize(
    ("max_tokens", "overlap", "match"),
    [(0, 0, "max_tokens must be at least 1"), (10, 10, "overlap"), (10, -1, "overlap")],
)
def test_invalid_sizes_raise_value_error(max_tokens: int, overlap: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        chunk_text("Some text.", max_tokens=max_tokens, overlap=overlap, tokenizer=BYTES)


def test_short_text_is_one_chunk_spanning_the_stripped_text() -> None:
    text = "  One sentence. Another one.\n"
    assert chunk_text(text, max_tokens=100, overlap=10, tokenizer=BYTES) == [
        Chunk(index=0, text="One sentence. Another one.", char_start=2, char_end=28, n_tokens=26)
    ]


def test_chunks_keep_sentences_whole_and_overlap_by_trailing_sentences() -> None:
    # ten 9-byte sentences: four fit in 39 bytes; the last one (9 ≤ 10 bytes) is the overlap
    text = " ".join(f"Unit {k:03d}." for k in range(10))
    chunks = chunk_text(text, max_tokens=39, overlap=10, tokenizer=BYTES)
    assert [c.text for c in chunks] == [
        "Unit 000. Unit 001. Unit 002. Unit 003.",
        "Unit 003. Unit 004. Unit 005. Unit 006.",
        "Unit 006. Unit 007. Unit 008. Unit 009.",
    ]


def test_no_overlap_when_the_last_sentence_is_larger_than_the_overlap() -> None:
    text = " ".join(f"Unit {k:03d}." for k in range(6))
    chunks = chunk_text(text, max_tokens=20, overlap=8, tokenizer=BYTES)
    assert [c.text for c in chunks] == [
        "Unit 000. Unit 001.",
        "Unit 002. Unit 003.",
        "Unit 004. Unit 005.",
    ]


def test_zero_overlap_makes_disjoint_chunks() -> None:
    text = " ".join(f"Sentence number {k}." for k in range(40))
    chunks = chunk_text(text, max_tokens=30, overlap=0)
    assert all(a.char_end < b.char_start for a, b in pairwise(chunks))


def test_long_sentence_is_split_at_punctuation_before_words() -> None:
    text = "alpha beta gamma, delta epsilon zeta; eta theta iota: kappa lambda mu."
    chunks = chunk_text(text, max_tokens=20, overlap=0, tokenizer=BYTES)
    assert [c.text for c in chunks] == [
        "alpha beta gamma,",
        "delta epsilon zeta;",
        "eta theta iota:",
        "kappa lambda mu.",
    ]


def test_unpunctuated_run_is_hard_split_at_character_boundaries() -> None:
    text = "😀é日" * 40  # 4 + 2 + 3 bytes per group: ByteTokenizer cuts would land mid-character
    chunks = chunk_text(text, max_tokens=10, overlap=3, tokenizer=BYTES)
    assert "".join(c.text for c in chunks) == text
    assert all(c.n_tokens <= 10 for c in chunks)


def test_hard_split_prefers_a_space_to_cutting_a_word() -> None:
    text = " ".join(["abcdefgh"] * 10)  # no punctuation, 89 bytes
    chunks = chunk_text(text, max_tokens=20, overlap=0, tokenizer=BYTES)
    assert {c.text for c in chunks} <= {"abcdefgh abcdefgh", "abcdefgh"}


def test_character_larger_than_max_tokens_raises_value_error() -> None:
    with pytest.raises(ValueError, match="raise max_tokens"):
        chunk_text("😀😀", max_tokens=3, overlap=0, tokenizer=BYTES)


def test_long_run_without_punctuation_or_spaces_is_chunked_quickly() -> None:
    """Only bounded windows are encoded, so a pathological file cannot stall the daemon."""
    text = "ab" * 150_000
    chunks = chunk_text(text, max_tokens=250, overlap=0)
    assert "".join(c.text for c in chunks) == text


def test_cinderella_chunks_fit_250_tokens_and_overlap_by_at_most_50() -> None:
    if not CINDERELLA.is_file():
        pytest.skip(f"{CINDERELLA} is missing")
    text = normalise_text(CINDERELLA.read_text(encoding="utf-8"))
    tok = default_tokenizer()
    chunks = chunk_text(text, max_tokens=250, overlap=50, tokenizer=tok)
    assert len(chunks) >= 10
    assert_chunk_invariants(text, chunks, 250, 50, tok)
    overlapping = [b for a, b in pairwise(chunks) if b.char_start < a.char_end]
    assert len(overlapping) >= len(chunks) // 2
    assert min(c.n_tokens for c in chunks[:-1]) >= 150  # packed, not one sentence per chunk


# Chunking: properties ----------------------------------------------------------------------------

_WORDS = st.sampled_from(
    ["the", "Mr.", "café", "naïve", "日本語", "😀", "👩‍👩‍👧", "3.14", "e.g.", "Straße", "x" * 30]
)
_SEPARATORS = st.sampled_from([" ", " ", " ", ", ", ". ", "! ", "? ", "\n", "\n\n", "。", "—"])


@st.composite
def documents(draw: st.DrawFn) -> str:
    """Text made of words and separators, with the odd arbitrary character thrown in."""
    parts: list[str] = []
    for _ in range(draw(st.integers(0, 80))):
        parts.append(draw(_WORDS | st.text(min_size=1, max_size=3)))
        parts.append(draw(_SEPARATORS))
    return "".join(parts)


@st.composite
def sizes(draw: st.DrawFn) -> tuple[int, int]:
    # 4 tokens hold any single character for byte-level BPE, so every text can be chunked
    max_tokens = draw(st.integers(4, 60))
    return max_tokens, draw(st.integers(0, max_tokens - 1))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=documents(), size=sizes())
def test_chunk_invariants_hold_with_byte_tokenizer(text: str, size: tuple[int, int]) -> None:
    max_tokens, overlap = size
    chunks = chunk_text(text, max_tokens=max_tokens, overlap=overlap, tokenizer=BYTES)
    assert_chunk_invariants(text, chunks, max_tokens, overlap, BYTES)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=documents(), size=sizes())
def test_chunk_invariants_hold_with_tiktoken(text: str, size: tuple[int, int]) -> None:
    max_tokens, overlap = size
    tok = default_tokenizer()
    chunks = chunk_text(text, max_tokens=max_tokens, overlap=overlap, tokenizer=tok)
    assert_chunk_invariants(text, chunks, max_tokens, overlap, tok)
