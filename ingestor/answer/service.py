"""One code path for ``adrap query``/``adrap ask`` and the daemon's ``/query``/``/ask``.

:func:`parse_request` turns parameters (CLI options or URL query strings) into a bounded
:class:`QueryRequest` (a bad value is a ``ValueError`` naming it: the CLI's one-line error, the
daemon's 400). :class:`QueryService` runs it: collapsed, traversal or postQFRAP retrieval, and for
``ask`` the answer with numbered citations. Store and embedder are used under ``lock`` only (the
daemon's writer shares them); LLM calls run outside it, so a slow model never stalls updates.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ingestor.answer.ask import (
    ANSWER_PROMPT_VERSION,
    citations_in,
    fit_prompt,
    numbered_context,
    prompt_size,
    qa_messages,
)
from ingestor.answer.modes import BASES, MODES
from ingestor.answer.no_match import SIMILARITY_HITS, best_similarity, match_fields
from ingestor.answer.params import bounded_param, flag_param, int_param
from ingestor.answer.provenance import ContextPart, SpanResolver, merge_spans
from ingestor.config import (
    AnswerSettings,
    ChunkSettings,
    PostqfrapSettings,
    QuerySettings,
    WatchSettings,
    bound_of,
    default_of,
)
from ingestor.errors import ContextWindowError, SummarizationError
from ingestor.protocols import Summarizer
from ingestor.read.access_classes import UNRESTRICTED, ClassRegistry, Identity
from ingestor.summarize.query_focused import QueryFocusedExtractiveSummarizer
from retriever import Embedder, NodeStore, ScoredNode, SearchFilter, answer_json, run_query
from retriever.schema import tree_relative

if TYPE_CHECKING:
    from ingestor.answer.postqfrap import QFResult
    from ingestor.summarize.openai_compat import OpenAISummarizer

log = logging.getLogger(__name__)

__all__ = ["LIMITS", "QueryDefaults", "QueryRequest", "QueryService", "parse_request"]

#: Upper bounds of the parameters a request may set (a daemon must not be asked for 10^9 tokens);
#: ``max_tokens`` and ``top_k`` are the settings' (``QueryDefaults``), these are their defaults.
LIMITS = {
    "max_tokens": default_of(WatchSettings, "http_max_tokens"),
    "top_k": default_of(WatchSettings, "http_max_top_k"),
    "k0": bound_of(PostqfrapSettings, "k0"),
    "answer_tokens": bound_of(AnswerSettings, "max_tokens"),
}
NO_LLM = (
    "no LLM configured (ADRAP_SUMMARY__BACKEND is not openai): no answer, the best context "
    "follows; set ADRAP_SUMMARY__BACKEND=openai and ADRAP_SUMMARY__OPENAI__BASE_URL to get answers"
)


@dataclass(frozen=True)
class QueryDefaults:
    """Values used for parameters a request leaves out (from Settings)."""

    mode: str = default_of(QuerySettings, "mode")
    max_tokens: int = default_of(QuerySettings, "max_tokens")
    top_k: int = default_of(QuerySettings, "top_k")
    k0: int = default_of(PostqfrapSettings, "k0")
    base: str = default_of(PostqfrapSettings, "base")
    summary_tokens: int = default_of(PostqfrapSettings, "summary_tokens")
    answer_tokens: int = default_of(AnswerSettings, "max_tokens")
    hybrid: bool = default_of(QuerySettings, "hybrid")
    #: The largest ``max_tokens`` and ``top_k`` a request may ask for
    #: (``ADRAP_WATCH__HTTP_MAX_TOKENS``, ``ADRAP_WATCH__HTTP_MAX_TOP_K``).
    max_tokens_limit: int = LIMITS["max_tokens"]
    top_k_limit: int = LIMITS["top_k"]


@dataclass(frozen=True)
class QueryRequest:
    """A validated request. ``max_tokens`` is the context budget, postQFRAP's tau."""

    question: str
    mode: str
    max_tokens: int
    top_k: int
    k0: int
    base: str
    flt: SearchFilter
    answer_tokens: int
    #: Search BM25 and dense vectors in one fused query (where the store has BM25 vectors).
    hybrid: bool = True


def _bounded(params: Mapping[str, object], name: str, default: int, high: int | None = None) -> int:
    return bounded_param(params, name, default, LIMITS[name] if high is None else high)


def parse_request(
    params: Mapping[str, object], *, tree: str, defaults: QueryDefaults
) -> QueryRequest:
    """Validate parameters ``q mode max_tokens top_k k0 base source min_layer max_layer
    answer_tokens hybrid`` (strings or numbers; missing → ``defaults``).

    Raises:
        ValueError: a parameter is missing, not a number, out of bounds or unknown.
    """
    question = str(params.get("q") or "").strip()
    if not question:
        raise ValueError("missing query parameter q (the question)")
    mode = str(params.get("mode") or defaults.mode)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    base = str(params.get("base") or defaults.base)
    if base not in BASES:
        raise ValueError(f"base must be one of {', '.join(BASES)}, not {base!r}")
    lo, hi = int_param(params, "min_layer", None), int_param(params, "max_layer", None)
    if (lo is not None and lo < 0) or (hi is not None and hi < 0):
        raise ValueError(f"min_layer and max_layer must be ≥ 0, got {lo}, {hi}")
    source = params.get("source")
    flt = SearchFilter(
        tree=tree, min_layer=lo, max_layer=hi, source_prefix=str(source) if source else None
    )
    return QueryRequest(
        question=question,
        mode=mode,
        max_tokens=_bounded(params, "max_tokens", defaults.max_tokens, defaults.max_tokens_limit),
        top_k=_bounded(params, "top_k", defaults.top_k, defaults.top_k_limit),
        k0=_bounded(params, "k0", defaults.k0),
        base=base,
        flt=flt,
        answer_tokens=_bounded(params, "answer_tokens", defaults.answer_tokens),
        hybrid=flag_param(params, "hybrid", defaults.hybrid),
    )


@dataclass
class Context:
    """The context of one request: the hits (or postQFRAP's result) and its parts."""

    hits: list[ScoredNode]
    parts: list[ContextPart]
    qf: QFResult | None
    seconds: float
    #: The best hit's cosine similarity to the question where the hits' scores are not (a fused
    #: hybrid score): what "nothing matches" compares with ``min_score``.
    similarity: float | None = None
    #: The model that embedded the question (its ``min_score`` applies).
    model: str = ""


class QueryService:
    """Runs requests against one tree.

    Args:
        store: the node store.
        embedder: embeds questions (and postQFRAP summaries when it clusters them again).
        tree: the tree queried.
        defaults: values of omitted parameters.
        summarizer: postQFRAP's summariser; None = the offline query-focused extractive one.
        llm: answers ``ask``; None = no LLM configured (``ask`` returns the context instead).
        lock: held around every use of the store and embedder.
        random_state: seed of postQFRAP's clustering.
        min_score: below this best-hit similarity, an answer says ``no_match`` (nothing in the
            tree seems to answer; the hits are still returned); None: never. A function of the
            model id is asked at each answer for the model that embedded its question (the
            threshold follows a daemon's query embedder when its tree changes model).
        classes: the tree's access classes, which decide what a restricted caller may read
            (None: an empty registry, so a restricted caller reads nothing).
    """

    def __init__(
        self,
        store: NodeStore,
        embedder: Embedder,
        tree: str,
        *,
        defaults: QueryDefaults | None = None,
        summarizer: Summarizer | None = None,
        llm: OpenAISummarizer | None = None,
        lock: contextlib.AbstractContextManager[Any] | None = None,
        random_state: int | None = 0,
        min_score: float | Callable[[str], float | None] | None = None,
        classes: ClassRegistry | None = None,
        answer_input_limit: int | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.tree = tree
        self.defaults = defaults or QueryDefaults()
        #: postQFRAP's summariser; None: the query-focused extractive one, made on first use
        #: (its tokenizer takes ~0.5 s to load, which a collapsed query does not need).
        self.summarizer: Summarizer | None = summarizer
        self.llm = llm
        self.lock: contextlib.AbstractContextManager[Any] = lock or contextlib.nullcontext()
        self.random_state = random_state
        self.min_score = min_score
        self.classes = classes if classes is not None else ClassRegistry(None)
        #: The answering model's input limit (``ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS``): an
        #: answer's prompt keeps the best parts that fit in it with the answer's tokens.
        self.answer_input_limit = answer_input_limit

    def parse(self, params: Mapping[str, object], caller: Identity = UNRESTRICTED) -> QueryRequest:
        """Validate ``params`` with this service's tree and defaults (ValueError: bad value);
        the filter keeps what ``caller`` may read."""
        req = parse_request(params, tree=self.tree, defaults=self.defaults)
        return replace(req, flt=self._folder_or_file(self.reader_filter(req.flt, caller)))

    def _folder_or_file(self, flt: SearchFilter) -> SearchFilter:
        """A source filter written without its ``/`` (``hr``) names the folder when no file of
        that name but a folder is there for this caller (``adrap query --source hr`` by another
        account than the tree's, whose CLI cannot read the tree to tell); a leading ``/`` or
        ``./`` is dropped. Counted under the caller's own filter: nothing else is learnt."""
        if not flt.source_prefix:
            return flt
        text = tree_relative(flt.source_prefix)
        flt = replace(flt, source_prefix=text or None)
        if not text or text.endswith("/"):
            return flt
        folder = replace(flt, source_prefix=f"{text}/")
        with self.lock:
            if self.store.count(flt) == 0 and self.store.count(folder) > 0:
                return folder
        return flt

    def reader_filter(self, flt: SearchFilter, caller: Identity) -> SearchFilter:
        """Return ``flt`` narrowed to the nodes ``caller`` may read (every door's one filter)."""
        return replace(flt, readable=self.classes.readable(caller))

    def query(
        self, params: Mapping[str, object], caller: Identity = UNRESTRICTED
    ) -> dict[str, Any]:
        """Return the JSON of ``adrap query --json`` / ``/query``, as ``caller`` may read it.

        Raises:
            ValueError: a bad parameter.
            SummarizationError: postQFRAP's summariser failed.
            RetrieverError: the store failed.
        """
        req = self.parse(params, caller)
        ctx = self.context(req)
        if ctx.qf is None:
            out = answer_json(
                req.question, req.mode, self.tree, req.max_tokens, ctx.hits, ctx.seconds
            )
        else:
            out = self._qf_json(req, ctx.qf, ctx.seconds)
        if ctx.qf is None and not ctx.hits:
            out["note"] = self.why_empty(req)
        return out | self._match(ctx, req.question)

    def why_empty(self, req: QueryRequest) -> str:
        """Why a context came back empty: nothing this caller may read matches the filter, or
        no node fits in the budget (the fill stops at the best match that does not fit)."""
        with self.lock:
            matching = self.store.count(req.flt)
        if not matching:
            return (
                f"nothing in tree {self.tree!r} that you may read matches this request's "
                "filter (source, layers); widen or drop it"
            )
        leaf = default_of(ChunkSettings, "max_tokens")
        return (
            f"no node fits in {req.max_tokens} tokens: the fill stops at the best match that "
            f"does not fit, and a leaf holds up to ADRAP_CHUNK__MAX_TOKENS tokens ({leaf} by "
            f"default); ask for max_tokens {leaf} or more"
        )

    def _match(self, ctx: Context, question: str) -> dict[str, Any]:
        low = self.min_score(ctx.model) if callable(self.min_score) else self.min_score
        return match_fields(ctx.similarity, ctx.hits, low, question)

    def ask(self, params: Mapping[str, object], caller: Identity = UNRESTRICTED) -> dict[str, Any]:
        """Return the JSON of ``adrap ask --json`` / ``/ask``: an answer with citations, from
        what ``caller`` may read.

        Without an LLM: ``answered`` false, ``reason`` says why, and the context is returned.

        Raises:
            ValueError, SummarizationError, RetrieverError: as for :meth:`query`; a failed answer
                raises (no partial answer is returned).
        """
        req = self.parse(params, caller)
        t0 = time.perf_counter()
        ctx = self.context(req, with_parts=True)
        dropped = self._fit_prompt(req, ctx) if self.llm is not None else 0
        text: str | None = None
        calls, prompt, completion = self._llm_counters()
        if self.llm is not None and ctx.parts:
            text, more = self._answer(req, ctx)
            dropped += more
        out: dict[str, Any] = {
            "question": req.question,
            "mode": req.mode,
            "tree": self.tree,
            "max_tokens": req.max_tokens,
            "answered": False,
            "answer": None,
            "reason": None,
            "citations": [],
            "unknown_citations": [],
            "context": numbered_context(ctx.parts),
            "parts": [p.to_json() for p in ctx.parts],
            "model": None,
            "prompt_version": ANSWER_PROMPT_VERSION,
        }
        if ctx.qf is not None:
            out["postqfrap"] = self._qf_stats(req, ctx.qf)
        out |= self._match(ctx, req.question)
        if dropped:
            out["parts_dropped"] = dropped  # past the model's input limit
        if self.llm is None:
            out["reason"] = NO_LLM
        elif not ctx.parts and dropped:
            out["reason"] = (
                f"the question and the prompt leave no room for context within the model's input "
                f"limit ({self.answer_input_limit} tokens); raise "
                "ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS if the model takes more, or ask for "
                "fewer answer tokens"
            )
        elif not ctx.parts:
            out["reason"] = "nothing was retrieved for the question; no answer"
        elif text is not None:
            used, unknown = citations_in(text, ctx.parts)
            c2, p2, d2 = self._llm_counters()
            out |= {
                "answered": True,
                "answer": text,
                "citations": [c.to_json() for c in used],
                "unknown_citations": unknown,
                "model": self.llm.model,
                "answer_calls": c2 - calls,
                "answer_prompt_tokens": p2 - prompt,
                "answer_completion_tokens": d2 - completion,
            }
        out["seconds"] = round(time.perf_counter() - t0, 4)
        return out

    def _answer(self, req: QueryRequest, ctx: Context) -> tuple[str, int]:
        """The model's answer over ``ctx.parts``, and the parts dropped to get it: a model that
        refuses the prompt as longer than its context window, naming the window, is asked
        again with the parts that fit it, and the window is kept for the next questions.

        Raises:
            SummarizationError: the call failed, or no part fits the window.
        """
        assert self.llm is not None
        dropped = 0
        for _ in range(3):
            messages = qa_messages(req.question, ctx.parts, req.answer_tokens)
            try:
                return self.llm.complete(messages, max_tokens=req.answer_tokens), dropped
            except ContextWindowError as exc:
                counted = prompt_size(req.question, ctx.parts, req.answer_tokens)
                limit = min(exc.fitting_limit(counted), counted - 1)
                known = self.answer_input_limit  # questions in other threads learn it too
                limit = limit if known is None else min(known, limit)
                log.warning(
                    "%s; answers now keep to %d tokens (adrap's count) for this model", exc, limit
                )
                self.answer_input_limit = limit
                dropped += fit_prompt(req.question, ctx.parts, req.answer_tokens, limit)
                if not ctx.parts:
                    raise
        raise SummarizationError(
            f"the answering model kept refusing the prompt as too long after {dropped} context "
            "parts were dropped; set ADRAP_SUMMARY__OPENAI__MAX_INPUT_TOKENS lower"
        )

    def _fit_prompt(self, req: QueryRequest, ctx: Context) -> int:
        """Drop the context's last (least relevant) parts until the answer's prompt and its
        ``answer_tokens`` fit the model's input limit; return how many were dropped."""
        limit = self.answer_input_limit
        dropped = fit_prompt(req.question, ctx.parts, req.answer_tokens, limit)
        if dropped:
            log.info("answer prompt: %d context parts dropped to fit %d tokens", dropped, limit)
        return dropped

    def context(self, req: QueryRequest, *, with_parts: bool = False) -> Context:
        """Retrieve the context of ``req`` (parts with spans: always for postQFRAP, else on ask)."""
        t0 = time.perf_counter()
        with self.lock:
            model = self.embedder.model_id  # a daemon's follows a change of model
            vector = self.embedder.embed_query(req.question)
            # Hybrid where it measured better (docs/retrieval.md): the collapsed tree and
            # postQFRAP's leaves/collapsed base; traversal stays dense (it lost 8 points).
            text = req.question if req.hybrid and req.mode != "traversal" else None
            if req.mode != "postqfrap":
                hits = run_query(
                    self.store,
                    vector,
                    req.flt,
                    mode=req.mode,
                    max_tokens=req.max_tokens,
                    top_k=req.top_k,
                    text=text,
                )
                parts = self._hit_parts(hits) if with_parts else []
                sim = self._similarity(vector, hits) if text is not None else None
                return Context(hits, parts, None, time.perf_counter() - t0, sim, model)
            from ingestor.answer.postqfrap import PostQFRAP, retrieve_k0  # sklearn: when used

            retrieved = retrieve_k0(
                self.store, vector, req.flt, base=req.base, k0=req.k0, top_k=req.top_k, text=text
            )
            vectors = self._vectors(retrieved)
            sim = best_similarity(vector, vectors[:SIMILARITY_HITS]) if text is not None else None
        qf = PostQFRAP(
            self.summarizer or self._default_summarizer(),
            _LockedEmbedder(self.embedder, self.lock),
            tau=req.max_tokens,
            summary_tokens=self.defaults.summary_tokens,
            random_state=self.random_state,
        ).run(req.question, retrieved, vectors, SpanResolver(self.store, self.lock))
        return Context(qf.retrieved, qf.parts, qf, time.perf_counter() - t0, sim, model)

    def _default_summarizer(self) -> Summarizer:
        self.summarizer = QueryFocusedExtractiveSummarizer()
        return self.summarizer

    def _similarity(self, vector: NDArray[np.float32], hits: list[ScoredNode]) -> float | None:
        first = hits[:SIMILARITY_HITS]
        return best_similarity(vector, self._vectors(first)) if first else None

    def _vectors(self, hits: list[ScoredNode]) -> NDArray[np.float32]:
        if not hits:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return self.store.retrieve_vectors([h.node.node_id for h in hits])

    def _hit_parts(self, hits: list[ScoredNode]) -> list[ContextPart]:
        resolver = SpanResolver(self.store)  # already under the lock
        return [
            ContextPart(h.node.text, (h.node.node_id,), merge_spans(resolver.spans_of(h.node)))
            for h in hits
        ]

    def _llm_counters(self) -> tuple[int, int, int]:
        llm = self.llm
        if llm is None:
            return 0, 0, 0
        return llm.calls, llm.prompt_tokens, llm.completion_tokens

    def _qf_stats(self, req: QueryRequest, qf: QFResult) -> dict[str, Any]:
        return {
            "base": req.base,
            "k0": req.k0,
            "retrieved": len(qf.retrieved),
            "retrieved_tokens": sum(h.node.n_tokens for h in qf.retrieved),
            "layers": qf.layers,
            "summarizer": qf.summarizer,
            "summary_calls": qf.calls,
            "prompt_tokens": qf.prompt_tokens,
            "completion_tokens": qf.completion_tokens,
            "summary_seconds": round(qf.seconds, 4),
        }

    def _qf_json(self, req: QueryRequest, qf: QFResult, seconds: float) -> dict[str, Any]:
        return {
            "question": req.question,
            "mode": "postqfrap",
            "tree": self.tree,
            "max_tokens": req.max_tokens,
            "total_tokens": qf.n_tokens,
            "seconds": round(seconds, 4),
            "postqfrap": self._qf_stats(req, qf),
            "parts": [p.to_json() for p in qf.parts],
            "hits": [h.to_json() for h in qf.retrieved],
            "context": qf.context,
        }


class _LockedEmbedder:
    """An embedder whose calls hold the service's lock (postQFRAP runs outside it)."""

    def __init__(self, inner: Embedder, lock: contextlib.AbstractContextManager[Any]) -> None:
        self.inner = inner
        self.lock = lock
        self.model_id = inner.model_id
        self.dim = inner.dim

    def embed_documents(self, texts: Any) -> NDArray[np.float32]:
        with self.lock:
            return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        with self.lock:
            return self.inner.embed_query(text)
