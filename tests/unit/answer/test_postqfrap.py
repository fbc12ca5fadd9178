"""postQFRAP and ask through QueryService, on a real qdrant-edge tree (hash embedder, extractive)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestor.answer.provenance import Span, SpanResolver, merge_spans
from ingestor.answer.service import QueryDefaults, QueryService, parse_request
from ingestor.cluster.two_step import TreeClusterer
from ingestor.errors import SummarizationError
from ingestor.pipeline import Pipeline
from ingestor.read.documents import read_document
from ingestor.read.tokens import count_tokens, default_tokenizer
from ingestor.summarize.extractive import ExtractiveSummarizer
from ingestor.summarize.openai_compat import QUERY_SUMMARY_PROMPT, OpenAISummarizer
from ingestor.tree.build import TreeBuilder, TreeParams
from models_store import ModelStore
from retriever.edge_store import EdgeNodeStore
from testkit.fakes import HashEmbedder

TOPICS = {
    "rivers/rhine.txt": "The Rhine flows from the Swiss Alps to the North Sea. Barges carry coal "
    "on the Rhine. Basel and Cologne lie on the Rhine. In 1986 a chemical spill at Basel "
    "turned the Rhine red. Salmon returned to the Rhine in the 1990s. Rotterdam is the port "
    "where the Rhine meets the sea. The Rhine valley grows wine on steep slopes.",
    "rivers/danube.txt": "The Danube rises in the Black Forest. The Danube flows through Vienna "
    "and Budapest. The Danube ends in a delta on the Black Sea. Pelicans nest in the Danube "
    "delta. Ships on the Danube carry grain to Constanta. The Danube crosses ten countries.",
    "cats.txt": "Cats sleep most of the day. A cat purrs when it is content. Cats groom their "
    "fur often. Kittens chase string for hours. Old cats sleep even more than kittens. A cat "
    "can jump five times its height. Cats hunt mice at dusk.",
    "markets.txt": "The stock market fell sharply on Monday. Bond yields rose after the central "
    "bank spoke. Investors sold shares of banks. The market recovered on Friday. Oil prices "
    "rose as supply fell. Gold gained as investors looked for safety.",
    "volcanoes.txt": "Etna is an active volcano on Sicily. Lava from Etna reached Catania in "
    "1669. Vesuvius buried Pompeii in the year 79. Volcanic ash makes soil fertile. "
    "Stromboli erupts every few minutes. Iceland has many volcanoes under glaciers.",
}
QUESTIONS = [
    "What happened at Basel in 1986?",
    "Where does the Danube end?",
    "When do cats hunt?",
    "Which volcano buried Pompeii?",
    "What did investors buy for safety?",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pipeline, Path]]:
    tmp = tmp_path_factory.mktemp("qf")
    root = tmp / "docs"
    for name, text in TOPICS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text.replace(". ", ".\n", 2))  # a few inner newlines
    emb = HashEmbedder()
    builder = TreeBuilder(
        emb,
        ExtractiveSummarizer(),
        lambda: TreeClusterer(random_state=0, n_epochs=50),
        TreeParams(summary_max_tokens=40),
    )
    p = Pipeline(
        tree="t",
        embedder=emb,
        builder=builder,
        store=EdgeNodeStore(tmp / "state" / "qdrant"),
        models=ModelStore(tmp / "state" / "models"),
        chunk_tokens=20,
        chunk_overlap=4,
    )
    p.build(root)
    yield p, root
    p.context.store.close()


def service(p: Pipeline, **kwargs: Any) -> QueryService:
    return QueryService(
        p.context.store, p.context.embedder, "t", defaults=QueryDefaults(k0=20), **kwargs
    )


def doc(root: Path, source: str) -> str:
    return read_document(root / source, root, max_bytes=10**6).text


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def assert_spans_resolve(out: dict[str, Any], root: Path) -> None:
    """Every span of every part is real text of its file, and that text is in the part."""
    assert out["parts"]
    for part in out["parts"]:
        assert part["spans"]
        for span in part["spans"]:
            assert span["char_start"] is not None, span
            text = doc(root, span["source"])[span["char_start"] : span["char_end"]]
            assert text.strip()
            assert squash(text) in squash(part["text"])


def test_tree_fixture_is_big_enough_for_clustering(built: tuple[Pipeline, Path]) -> None:
    p, _ = built
    assert len([n for n in p.require_state().nodes.values() if n.layer == 0]) > 20


@pytest.mark.parametrize("base", ["leaves", "collapsed", "traversal"])
def test_postqfrap_context_fits_tau_and_every_part_resolves_to_a_file_span(
    built: tuple[Pipeline, Path], base: str
) -> None:
    p, root = built
    out = service(p).query({"q": QUESTIONS[0], "mode": "postqfrap", "base": base, "max_tokens": 60})
    assert out["mode"] == "postqfrap"
    assert 0 < out["total_tokens"] <= 60
    assert count_tokens(out["context"]) <= 60
    assert " ".join(part["text"] for part in out["parts"]) == out["context"]
    assert out["postqfrap"]["base"] == base
    assert_spans_resolve(out, root)
    if base == "leaves":
        assert out["postqfrap"]["retrieved"] == 20
        assert out["postqfrap"]["layers"] >= 2  # 20 > 10 nodes: one round of clustering
        assert out["postqfrap"]["summary_calls"] >= 2
        assert "1986" in out["context"]


def test_postqfrap_is_deterministic(built: tuple[Pipeline, Path]) -> None:
    p, _ = built
    params = {"q": QUESTIONS[1], "mode": "postqfrap", "max_tokens": 80}
    first, second = service(p).query(params), service(p).query(params)
    for out in (first, second):
        out.pop("seconds")
        out["postqfrap"].pop("summary_seconds")
    assert first == second


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    question=st.sampled_from([*QUESTIONS, "zebra", "Rhine Danube cats"]),
    tau=st.integers(min_value=5, max_value=400),
    k0=st.integers(min_value=1, max_value=30),
)
def test_every_sentence_of_the_context_occurs_in_a_retrieved_node(
    built: tuple[Pipeline, Path], question: str, tau: int, k0: int
) -> None:
    p, root = built
    out = service(p).query({"q": question, "mode": "postqfrap", "max_tokens": tau, "k0": k0})
    assert count_tokens(out["context"]) <= tau
    retrieved = [h["text"] for h in out["hits"]]
    assert len(retrieved) == min(k0, out["postqfrap"]["retrieved"])
    for part in out["parts"]:
        assert any(squash(part["text"]) in squash(t) for t in retrieved), part["text"]
    assert_spans_resolve(out, root)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"q": ""}, "missing query parameter q"),
        ({"q": "x", "mode": "magic"}, "mode must be one of collapsed, traversal, postqfrap"),
        ({"q": "x", "base": "bm25"}, "base must be one of leaves, collapsed, traversal"),
        ({"q": "x", "k0": "201"}, "k0 must be between 1 and 200, got 201"),
        ({"q": "x", "k0": "0"}, "k0 must be between 1 and 200, got 0"),
        ({"q": "x", "max_tokens": "32001"}, "max_tokens must be between 1 and 32000"),
        ({"q": "x", "top_k": "ten"}, "top_k must be an integer, got 'ten'"),
    ],
)
def test_bad_parameters_are_errors_naming_the_value(params: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_request(params, tree="t", defaults=QueryDefaults())


def test_ask_without_an_llm_says_so_and_returns_the_context(built: tuple[Pipeline, Path]) -> None:
    p, root = built
    out = service(p).ask({"q": QUESTIONS[2], "max_tokens": 120})
    assert out["answered"] is False
    assert out["answer"] is None
    assert "no LLM configured" in out["reason"]
    assert out["context"].startswith("[1] ")
    assert_spans_resolve(out, root)


def fake_llm(handler: Callable[[dict[str, Any]], httpx.Response]) -> OpenAISummarizer:
    def transport(request: httpx.Request) -> httpx.Response:
        return handler(json.loads(request.content))

    client = openai.OpenAI(
        api_key="test",
        base_url="http://llm.test/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(transport)),  # type: ignore[arg-type]
    )
    return OpenAISummarizer(client, "fake", max_retries=0, backoff_base=0.0)


def reply(text: str) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    )


def test_ask_sends_the_qa_prompt_with_numbered_sources_and_maps_citations(
    built: tuple[Pipeline, Path],
) -> None:
    p, root = built
    bodies: list[dict[str, Any]] = []

    def handler(body: dict[str, Any]) -> httpx.Response:
        bodies.append(body)
        return reply("The spill turned the river red [1][2]; see also [99].")

    out = service(p, llm=fake_llm(handler)).ask({"q": QUESTIONS[0], "max_tokens": 200})
    (body,) = bodies
    system, user = body["messages"]
    assert "Question Answering Portal" in system["content"]
    assert "[1] " in system["content"]
    assert "[2] " in system["content"]
    assert QUESTIONS[0] in user["content"]
    assert out["answered"] is True
    assert out["answer"].startswith("The spill")
    assert [c["n"] for c in out["citations"]] == [1, 2]
    assert out["unknown_citations"] == [99]
    assert out["answer_calls"] == 1
    for c in out["citations"]:
        assert c["text"] == out["parts"][c["n"] - 1]["text"]
    assert_spans_resolve(out, root)


def test_the_answer_prompt_keeps_the_best_parts_that_fit_the_models_input_limit(
    built: tuple[Pipeline, Path],
) -> None:
    """A context budget the model cannot take (the daemon answered 502: "request (2112 tokens)
    exceeds the available context size (2048)"): the least relevant parts are left out."""
    p, _ = built
    bodies: list[dict[str, Any]] = []

    def handler(body: dict[str, Any]) -> httpx.Response:
        bodies.append(body)
        return reply("An answer [1].")

    tokenizer = default_tokenizer()
    params = {"q": QUESTIONS[0], "max_tokens": 600, "answer_tokens": 64}
    whole = service(p, llm=fake_llm(handler)).ask(params)
    assert len(whole["parts"]) > 2
    limit = 400
    out = service(p, llm=fake_llm(handler), answer_input_limit=limit).ask(params)
    sent = sum(tokenizer.count(m["content"]) for m in bodies[-1]["messages"]) + 64
    assert sent <= limit < sum(tokenizer.count(m["content"]) for m in bodies[0]["messages"]) + 64
    kept = len(out["parts"])
    assert 0 < kept < len(whole["parts"])
    assert out["parts"] == whole["parts"][:kept], "the best parts, in order"
    assert out["parts_dropped"] == len(whole["parts"]) - kept
    assert out["answered"] is True
    tiny = service(p, llm=fake_llm(handler), answer_input_limit=80).ask(params)
    assert tiny["answered"] is False
    assert "no room for context" in tiny["reason"]


def test_postqfrap_with_an_llm_sends_query_focused_prompts_and_cuts_to_tau(
    built: tuple[Pipeline, Path],
) -> None:
    p, _ = built
    bodies: list[dict[str, Any]] = []

    def handler(body: dict[str, Any]) -> httpx.Response:
        bodies.append(body)
        return reply("Basel spill river red. " * 50)  # longer than tau: cut

    llm = fake_llm(handler)
    out = service(p, summarizer=llm).query(
        {"q": QUESTIONS[0], "mode": "postqfrap", "max_tokens": 40}
    )
    head = QUERY_SUMMARY_PROMPT.split("{max_tokens}")[0]
    assert bodies
    for body in bodies:
        user = body["messages"][1]["content"]
        assert user.startswith(head)
        assert user.endswith(f"Question: {QUESTIONS[0]} Summary:")
    assert bodies[-1]["max_tokens"] == 40
    assert count_tokens(out["context"]) <= 40
    assert out["postqfrap"]["summary_calls"] == len(bodies)
    assert out["postqfrap"]["prompt_tokens"] == 10 * len(bodies)
    (part,) = out["parts"]  # an abstractive summary maps to every retrieved node
    assert len(part["node_ids"]) == out["postqfrap"]["retrieved"]


def test_a_failing_llm_is_an_error_and_no_partial_answer(built: tuple[Pipeline, Path]) -> None:
    p, _ = built

    def handler(body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(500, json={"error": {"message": "boom"}})

    llm = fake_llm(handler)
    with pytest.raises(SummarizationError, match="HTTP 500"):
        service(p, summarizer=llm, llm=llm).ask({"q": QUESTIONS[0], "mode": "postqfrap"})
    with pytest.raises(SummarizationError, match="answer by model 'fake'"):
        service(p, llm=llm).ask({"q": QUESTIONS[0]})


def test_a_summary_sentence_is_traced_to_its_leaf_span_and_an_invented_one_to_its_files(
    built: tuple[Pipeline, Path],
) -> None:
    p, root = built
    state = p.require_state()
    summary = next(n for n in state.nodes.values() if n.layer >= 1)
    (node,) = p.context.store.retrieve([summary.node_id])
    resolver = SpanResolver(p.context.store)
    first = node.text.split(". ")[0] + "."
    (span,) = resolver.locate(node, first)
    assert span.char_start is not None
    assert squash(doc(root, span.source)[span.char_start : span.char_end]) == squash(first)
    invented = resolver.locate(node, "Zebras never appear in this corpus.")
    assert invented == [Span(s) for s in node.sources]


def test_merge_spans_joins_overlaps_of_one_file_and_lets_a_whole_file_absorb_its_spans() -> None:
    spans = [Span("a", 10, 20), Span("a", 15, 30), Span("a", 40, 50), Span("b", 0, 5), Span("b")]
    assert merge_spans(spans) == (Span("a", 10, 30), Span("a", 40, 50), Span("b"))
