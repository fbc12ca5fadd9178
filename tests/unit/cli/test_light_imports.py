"""Commands load only what they need: what a fresh ``adrap`` process imported, per command.

Not a timing test: the libraries left out (torch, scikit-learn, UMAP, numpy) are each seconds of
a cold start (bench/cli.py measures the times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from ingestor.service.locking import state_lock

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("numpy", "torch", "sentence_transformers", "transformers", "sklearn", "umap", "scipy")
PROBE = """
import json, sys
from ingestor.cli import main
failed = None
try:
    main(sys.argv[1:], standalone_mode=False)
except BaseException as exc:
    failed = repr(exc)
print("\\nIMPORTED " + json.dumps([[m for m in {heavy!r} if m in sys.modules], failed]))
"""


def imported(*args: str, fails: bool = False) -> list[str]:
    """Run ``adrap ARGS`` in a fresh interpreter; return the heavy modules it imported.

    ``fails``: the command is expected to end in an error (a refused writer), else to succeed.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found, failed = json.loads(out.rsplit("IMPORTED ", 1)[1])
    assert (failed is not None) == fails, failed
    assert isinstance(found, list)
    return found


def test_help_imports_nothing_heavy() -> None:
    assert imported("--help") == []
    assert imported("query", "--help") == []


def test_status_reads_the_tree_without_torch_sklearn_or_umap(built: Path) -> None:
    found = imported("status")
    assert "numpy" in found  # the state's rows
    assert not {"torch", "sentence_transformers", "sklearn", "umap", "scipy"} & set(found)


def test_a_refused_writer_says_so_before_numpy_or_the_model(built: Path, tmp_path: Path) -> None:
    with state_lock(tmp_path / "state", "watch"):
        assert imported("add", str(built / "fables"), fails=True) == []
        result = CliRunner().invoke(main, ["add", str(built / "fables")])
    assert result.exit_code == 1
    assert "adrap watch" in result.output


@pytest.mark.parametrize("command", ["build", "rebuild"])
def test_other_writers_are_refused_as_light(command: str, built: Path, tmp_path: Path) -> None:
    args = [command, str(built)] if command == "build" else [command]
    with state_lock(tmp_path / "state", "watch"):
        assert imported(*args, fails=True) == []
