"""Helpers the tests and the benches share: fakes, generated documents and office files, the local
model servers, the soak and the kill -9 rounds.

tests/ and bench/ both import from here and never from each other (tests/test_house.py checks it);
testkit imports neither. It is not part of the wheel (pyproject.toml ships ingestor, retriever and
models_store only).
"""
