"""Integration fixtures: a real OpenAI-compatible LLM server (xllamacpp + SmolLM2-135M).

The server runs in a child process (llama.cpp's C++ threads and its stderr chatter stay out of
the pytest process, and a crash there cannot take pytest down). The child binds 127.0.0.1 on a
port the OS picks, prints its address, and serves until its stdin closes: the fixture closes it at
teardown, and if pytest itself dies the pipe closes too, so no server outlives the session.

Use the session fixture ``llm_server`` (``.base_url`` ends in ``/v1``, ``.model`` is the name the
server accepts), or ``testkit.servers.running_llm_server()`` to start a private one with other
settings.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.servers import LLMServer, running_llm_server


@pytest.fixture(scope="session")
def llm_server() -> Iterator[LLMServer]:
    """A real OpenAI-compatible server with SmolLM2-135M, shared by the whole session."""
    with running_llm_server() as server:
        yield server
