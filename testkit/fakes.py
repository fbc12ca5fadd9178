"""Fast deterministic stand-ins for the tests (and the benches that need a fast embedder), used
beside the real parts, never instead of them."""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import queue
import re
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

_WORD = re.compile(r"\w+")
T = TypeVar("T")


@functools.lru_cache(maxsize=1 << 18)
def _word_hash(word: str) -> int:
    """A word's hash, remembered: a corpus repeats its words (the bench's builds hash ~6M)."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")


class HashEmbedder:
    """Hashed bag of words times a seeded random projection, L2-normalised.

    Texts sharing words get similar vectors, so clustering and search behave sensibly.
    """

    def __init__(self, dim: int = 32, seed: int = 0, n_buckets: int = 4096) -> None:
        self.model_id = f"hash-{dim}"
        self.dim = dim
        self.n_buckets = n_buckets
        self._proj = (
            np.random.default_rng(seed).standard_normal((n_buckets, dim)).astype(np.float32)
        )

    def _bucket(self, word: str) -> int:
        return _word_hash(word) % self.n_buckets

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            if not words:
                words = ["<empty>"]
            idx = [self._bucket(w) for w in words]
            out[i] = self._proj[idx].sum(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        out /= norms
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = self.embed_documents([text])[0]
        return vector


class CountingEmbedder(HashEmbedder):
    """A 48-d :class:`HashEmbedder` that keeps every text it embedded (``texts``)."""

    def __init__(self) -> None:
        super().__init__(dim=48)
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.texts.extend(texts)
        return super().embed_documents(texts)


class EchoSummarizer:
    """Joins the first words of each text: deterministic, shows which texts were summarised."""

    id = "echo"
    prompt_version = "1"

    def __init__(self) -> None:
        self.calls = 0

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        self.calls += len(groups)
        return [self.summary_of(texts, max_tokens) for texts in groups]

    def summary_of(self, texts: Sequence[str], max_tokens: int) -> str:
        """One group's summary: the first 8 words of each text, at most ``max_tokens`` words."""
        words = " ".join(" ".join(t.split()[:8]) for t in texts).split()
        return " ".join(words[:max_tokens])


class QuotingSummarizer(EchoSummarizer):
    """Quotes the first ``words`` words of every child, uncapped: a summary's text holds a word
    of every file under it (tests of who may read a summary's text)."""

    def __init__(self, words: int = 3) -> None:
        super().__init__()
        self.words = words

    def summarize_many(
        self, groups: Sequence[Sequence[str]], *, max_tokens: int, query: str | None = None
    ) -> list[str]:
        self.calls += len(groups)
        n = self.words
        return [" ".join(" ".join(t.split()[:n]) for t in texts) for texts in groups]


class ByteTokenizer:
    """One token per UTF-8 byte: splits characters the way byte-level BPE does."""

    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: Sequence[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return bytes(tokens)


class FakeClock:
    """A clock the test drives (:class:`ingestor.service.clock.Clock`): no test sleeps.

    Virtual time starts at 0 and passes only when a wait finds nothing to take (or by
    :meth:`advance`); actions scheduled with :meth:`after` run when it reaches them, inside the
    wait, as an observer's events would arrive. ``waits`` records every timeout asked for.

    Args:
        patience: real seconds a wait first gives a real producer (watchdog's observer thread)
            to put something on the queue before its virtual timeout counts as passed: the
            poll-with-deadline for real OS events. 0 when the test puts every event itself.
        limit: virtual seconds after which a wait fails the test instead of waiting for an
            event that never comes.
    """

    def __init__(self, patience: float = 0.0, limit: float = 3600.0) -> None:
        self.now = 0.0
        self.epoch = time.time()
        self.patience = patience
        self.limit = limit
        self.waits: list[float] = []
        self._timers: list[tuple[float, int, Callable[[], object]]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.epoch + self.now

    def after(self, seconds: float, action: Callable[[], object]) -> None:
        """Run ``action`` once ``seconds`` of virtual time have passed."""
        heapq.heappush(self._timers, (self.now + seconds, next(self._order), action))

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, running the actions due."""
        end = self.now + seconds
        while self._timers and self._timers[0][0] <= end:
            at, _, action = heapq.heappop(self._timers)
            self.now = max(self.now, at)
            action()
        self.now = end

    def get(self, items: queue.Queue[T], timeout: float) -> T:
        self.waits.append(timeout)
        end = self.now + timeout
        while True:
            try:
                return items.get(timeout=self.patience) if self.patience else items.get_nowait()
            except queue.Empty:
                pass
            if not self._timers or self._timers[0][0] > end:
                break
            at, _, action = heapq.heappop(self._timers)
            self.now = max(self.now, at)
            action()
        self.now = max(self.now, end)
        if self.now > self.limit:
            raise AssertionError(f"waited {self.now:.0f} virtual s for an event that never came")
        raise queue.Empty
