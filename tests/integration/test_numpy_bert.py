"""The numpy BERT that embeds questions gives sentence-transformers' vectors (packaged model)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from retriever import NumpyBertEmbedder, SentenceTransformerEmbedder
from retriever.numpy_bert import supported

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


def test_a_model_that_is_not_a_mean_pooled_bert_is_refused(tmp_path: Path) -> None:
    assert not supported(tmp_path)
    with pytest.raises(Exception, match="not a BERT"):
        NumpyBertEmbedder(str(tmp_path))


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
