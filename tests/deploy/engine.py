"""podman helpers for the slow image tests: the engine settings of these machines, run, stats, stop.

crun fails on the build machines ("cgroups in hybrid mode not supported") and the sandbox cannot
raise rlimits, so every podman call gets runc and lowered ulimits through a ``containers.conf``
(``CONTAINERS_CONF``), which podman-compose's podman calls inherit too.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx

from testkit.servers import free_port as free_port  # the tests here import it from this module

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
"""
#: Where the image's daemon reads its bearer token (a secret file; see docs/deploy.md).
TOKEN_SECRET = "/run/secrets/adrap_watch__http_token"
_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20}


def compose_command() -> str | None:
    """The project's podman-compose (pinned in pyproject.toml, beside the interpreter) first, then
    one on PATH: Debian's (1.0.3) has no ``config`` command and reads the files differently."""
    return shutil.which("podman-compose", path=str(Path(sys.executable).parent)) or shutil.which(
        "podman-compose"
    )


def podman(*args: str, env: dict[str, str], timeout: float = 120) -> str:
    """Run ``podman args`` and return its stdout; fail with its stderr when it fails."""
    done = subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout


@contextlib.contextmanager
def container(
    image: str, env: dict[str, str], share: Path, port: int, token_file: Path
) -> Iterator[str]:
    """Run the image as docs/deploy.md does: read-only root, tmpfs /tmp, state volume, the share
    read-only, the token as a secret file, HTTP published on loopback. Removed (with its volume)
    on exit."""
    name = f"adrap-test-{uuid.uuid4().hex[:8]}"
    volume = f"{name}-state"
    podman(
        "run", "-d", "--name", name,
        "--read-only", "--tmpfs", "/tmp",
        "-v", f"{volume}:/state",
        "-v", f"{share}:/data:ro",
        "-v", f"{token_file}:{TOKEN_SECRET}:ro",
        "-p", f"127.0.0.1:{port}:8765",
        image,
        env=env,
    )  # fmt: skip
    try:
        yield name
    finally:
        subprocess.run(["podman", "rm", "-f", name], env=env, capture_output=True, timeout=120)
        subprocess.run(["podman", "volume", "rm", "-f", volume], env=env, capture_output=True)


def wait_ready(url: str, timeout: float) -> float:
    """Seconds until ``url/readyz`` answers 200 (no token needed there)."""
    t0 = time.monotonic()
    with httpx.Client(timeout=5) as http:
        while time.monotonic() - t0 < timeout:
            with contextlib.suppress(httpx.TransportError):
                if http.get(f"{url}/readyz").status_code == 200:
                    return time.monotonic() - t0
            time.sleep(0.5)
    raise AssertionError(f"{url}/readyz not 200 within {timeout} s")


def memory_bytes(name: str, env: dict[str, str]) -> float:
    """The container's memory use as ``podman stats`` reports it (cgroup usage, page cache in)."""
    stats = json.loads(podman("stats", "--no-stream", "--format", "json", name, env=env))[0]
    found = re.fullmatch(r"([\d.]+)\s*([A-Za-z]+)", stats["mem_usage"].split("/")[0].strip())
    assert found, f"unreadable podman stats: {stats['mem_usage']!r}"
    assert found.group(2) in _UNITS, f"unknown unit in podman stats: {stats['mem_usage']!r}"
    return float(found.group(1)) * _UNITS[found.group(2)]


def _timestamp(text: str) -> float:
    """podman's RFC 3339 time (nanoseconds) as a Unix time."""
    found = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    assert found, f"unreadable podman time: {text!r}"
    zone = "+00:00" if found.group(3) == "Z" else found.group(3)
    whole = datetime.fromisoformat(found.group(1) + zone).timestamp()
    return whole + float("0." + (found.group(2) or "0"))


def sigterm_to_exit(name: str, env: dict[str, str], timeout: float = 60) -> tuple[float, int]:
    """Send SIGTERM, wait for the exit; return (seconds from the signal to the container's
    recorded finish, exit code). Measured by the container's FinishedAt, not by how long
    ``podman stop`` takes to do its own bookkeeping."""
    sent = time.time()
    podman("kill", "--signal", "TERM", name, env=env)
    while True:
        state = json.loads(podman("inspect", name, env=env))[0]["State"]
        if state["Status"] in ("exited", "stopped"):
            return _timestamp(state["FinishedAt"]) - sent, int(state["ExitCode"])
        assert time.time() - sent < timeout, f"{name} still {state['Status']} after {timeout} s"
        time.sleep(0.2)
