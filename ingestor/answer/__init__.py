"""Answering questions from the tree: postQFRAP contexts, answers with citations, one code path.

- :mod:`~ingestor.answer.postqfrap`: Algorithm 3 of [A] (query-focused tree over k0 retrieved nodes).
- :mod:`~ingestor.answer.provenance`: files and character spans of every part of a context.
- :mod:`~ingestor.answer.ask`: the QA prompt and numbered citations.
- :mod:`~ingestor.answer.service`: request parsing and dispatch, shared by the CLI and the daemon.
"""
