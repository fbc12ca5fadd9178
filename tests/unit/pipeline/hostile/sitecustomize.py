"""Hostile converters, for the read-budget tests: loaded at start-up by every Python started
with this folder on ``PYTHONPATH`` (the reader processes a test spawns, never the test itself).

A file named ``*.bomb.txt`` is converted by allocating without bound (as the ``.ods`` whose one
cell repeats a billion times), ``*.hang.txt`` by never returning (as a regex that backtracks for
hours). Each conversion appends the file's name to the file ``$HOSTILE_CALLS`` first, so a test
can tell which files were read.
"""

from __future__ import annotations

import os
import time
from typing import Any


def _install() -> None:
    from ingestor.read import formats

    real = formats.extract

    def extract(data: bytes, name: str, suffix: str, **kw: Any) -> Any:
        calls = os.environ.get("HOSTILE_CALLS")
        if calls:
            with open(calls, "a", encoding="utf-8") as f:
                f.write(name + "\n")
        if name.endswith(".bomb.txt"):
            held = []
            while True:
                held.append(b"x" * (16 << 20))  # touched: resident, as a real bomb's
        if name.endswith(".hang.txt"):
            while True:  # a reader that hangs: what the test stops
                time.sleep(1)
        return real(data, name, suffix, **kw)

    formats.extract = extract


_install()
