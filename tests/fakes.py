"""Fast deterministic stand-ins for unit tests, used beside the real parts, never instead of them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

_WORD = re.compile(r"\w+")


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
        return (
            int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            % self.n_buckets
        )

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
        return out / norms

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.embed_documents([text])[0]


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
        out = []
        for texts in groups:
            words = " ".join(" ".join(t.split()[:8]) for t in texts).split()
            out.append(" ".join(words[:max_tokens]))
        return out


class ByteTokenizer:
    """One token per UTF-8 byte: splits characters the way byte-level BPE does."""

    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: Sequence[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return bytes(tokens)
