"""The ``adrap`` command run as a user runs it: a child process of this Python."""

from __future__ import annotations

import os
import subprocess
import sys


def adrap(
    *args: str, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ingestor ARGS`` with this environment less its ``ADRAP_*`` variables,
    plus ``env``; return what it printed and its exit status."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")} | env
    return subprocess.run(
        [sys.executable, "-m", "ingestor", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
    )
