"""Which embedder runs a model in this process: the packaged BERT on torch alone, others through
sentence-transformers."""

from __future__ import annotations

from retriever.embedding import DEFAULT_MODEL, SentenceTransformerEmbedder, resolve_model_path
from retriever.numpy_bert import supported
from retriever.torch_bert import TorchBertEmbedder

__all__ = ["in_process"]


def in_process(
    model: str = DEFAULT_MODEL, *, batch_size: int = 32, device: str = "cpu"
) -> SentenceTransformerEmbedder | TorchBertEmbedder:
    """The embedder of ``model`` in this process: a BERT with mean pooling (the packaged default
    is one) on torch alone (:class:`~retriever.torch_bert.TorchBertEmbedder`: sentence-transformers'
    vectors, ~7 s less to start), any other model through sentence-transformers.

    Raises:
        EmbeddingError: the model is not installed or cannot be loaded.
    """
    if supported(resolve_model_path(model)):
        return TorchBertEmbedder(model, batch_size=batch_size, device=device)
    return SentenceTransformerEmbedder(model, batch_size=batch_size, device=device)
