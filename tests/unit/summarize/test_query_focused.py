"""The query-focused extractive summariser: relevant, diverse, ordered, bounded, deterministic."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestor.errors import SummarizationError
from ingestor.protocols import Summarizer
from ingestor.read.tokens import count_tokens
from ingestor.summarize.query_focused import QueryFocusedExtractiveSummarizer, split_units

TEXTS = [
    "The Rhine flows from the Swiss Alps to the North Sea. It passes Basel and Cologne.",
    "Barges on the Rhine carry coal and grain. Rotterdam is the largest port on the river.",
    "In 1986 a chemical spill at Basel turned the river red. Many fish died downstream.",
]
SENTENCES = [
    "Cats purr when they are content.",
    "A cat purrs when it is content and warm.",
    "Dogs bark at strangers near the gate.",
    "The stock market fell sharply on Monday.",
    "Rotterdam is the largest port in Europe.",
    "Kittens chase string for hours.",
    "Basel lies on the Rhine at the Swiss border.",
]


@pytest.fixture(scope="module")
def qf() -> QueryFocusedExtractiveSummarizer:
    return QueryFocusedExtractiveSummarizer()


def test_it_satisfies_the_summarizer_protocol(qf: QueryFocusedExtractiveSummarizer) -> None:
    summarizer: Summarizer = qf
    (summary,) = summarizer.summarize_many([TEXTS], max_tokens=30, query="Which port?")
    assert "Rotterdam" in summary


def test_the_sentence_answering_the_question_wins_a_tight_budget(
    qf: QueryFocusedExtractiveSummarizer,
) -> None:
    (picked,) = qf.select(
        [split_units(TEXTS)], query="What happened in 1986 at Basel?", max_tokens=16
    )
    assert [p.text for p in picked] == ["In 1986 a chemical spill at Basel turned the river red."]


@pytest.mark.parametrize(("diversity", "second"), [(0.3, 2), (0.0, 1)])
def test_mmr_prefers_a_new_fact_to_a_near_copy_of_a_picked_one(
    diversity: float, second: int
) -> None:
    """Without the diversity term (0.0) the near copy wins: the default (0.3) is what avoids it."""
    texts = [
        "Cats purr when they are content.",
        "Cats purr when they are content and warm.",
        "Dogs bark at strangers.",
    ]
    budget = count_tokens(f"{texts[0]} {texts[1]}")  # room for the copy or the new fact
    qf = QueryFocusedExtractiveSummarizer(diversity=diversity)
    (picked,) = qf.select(
        [split_units([" ".join(texts)])], query="cats purr content dogs", max_tokens=budget
    )
    assert [p.text for p in picked] == [texts[0], texts[second]]


def test_output_keeps_the_sources_order_not_the_score_order(
    qf: QueryFocusedExtractiveSummarizer,
) -> None:
    (picked,) = qf.select(
        [split_units(TEXTS)], query="Rotterdam port Basel spill 1986", max_tokens=60
    )
    keys = [(p.origin, p.start) for p in picked]
    assert keys == sorted(keys)
    assert len(picked) >= 2


def test_sentences_repeated_by_overlapping_chunks_appear_once(
    qf: QueryFocusedExtractiveSummarizer,
) -> None:
    (summary,) = qf.summarize_many([[TEXTS[0], TEXTS[0]]], max_tokens=200, query="Rhine")
    assert summary.count("It passes Basel and Cologne.") == 1


def test_it_is_deterministic_across_instances() -> None:
    groups = [split_units(TEXTS), split_units(SENTENCES)]
    a = QueryFocusedExtractiveSummarizer().select(groups, query="river port", max_tokens=25)
    b = QueryFocusedExtractiveSummarizer().select(groups, query="river port", max_tokens=25)
    assert a == b


def test_a_sentence_longer_than_the_budget_is_cut_to_a_prefix_with_its_span(
    qf: QueryFocusedExtractiveSummarizer,
) -> None:
    text = "  " + " ".join(["word"] * 80) + "."
    (picked,) = qf.select([split_units([text])], query="word", max_tokens=5)
    (s,) = picked
    assert count_tokens(s.text) <= 5
    assert text[s.start : s.end] == s.text


def test_an_empty_group_or_budget_is_an_error_before_any_work(
    qf: QueryFocusedExtractiveSummarizer,
) -> None:
    calls = qf.calls
    with pytest.raises(SummarizationError, match="group 1 has no sentence"):
        qf.select([split_units(TEXTS), []], query="x", max_tokens=10)
    with pytest.raises(SummarizationError, match="max_tokens must be at least 1"):
        qf.select([split_units(TEXTS)], query="x", max_tokens=0)
    assert qf.calls == calls


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(
        st.lists(st.sampled_from([*SENTENCES, "Ünïcödé straße ☃ — naïve café."]), max_size=6).map(
            lambda s: "  ".join(s)
        ),
        min_size=1,
        max_size=5,
    ).filter(lambda ts: any(t.strip() for t in ts)),
    query=st.sampled_from(["", "cats", "Which port is largest?", "Basel Rhine", "zebra"]),
    budget=st.integers(min_value=1, max_value=120),
)
def test_every_output_sentence_is_an_exact_slice_of_an_input_and_the_summary_fits(
    texts: list[str], query: str, budget: int
) -> None:
    qf = QueryFocusedExtractiveSummarizer()
    (picked,) = qf.select([split_units(texts)], query=query, max_tokens=budget)
    assert picked
    assert count_tokens(qf.join(picked)) <= budget
    for s in picked:
        assert texts[s.origin][s.start : s.end] == s.text
        assert s.text.strip() in texts[s.origin]
