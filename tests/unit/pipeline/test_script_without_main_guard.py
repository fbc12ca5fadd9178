"""The package used from a script: spawned reader processes import the main script, so one that
builds at import time without `if __name__ == "__main__":` made each reader exit before reading,
and the error blamed "an import error in this installation"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from ingestor.cli.factories import make_pipeline
from ingestor.config import Settings
from retriever.edge_store import EdgeNodeStore
from testkit.fakes import HashEmbedder

tmp = Path({tmp!r})
settings = Settings(_env_file=None, state_dir=tmp / "state")
store = EdgeNodeStore(tmp / "state" / "qdrant")
make_pipeline(settings, store, HashEmbedder()).build(tmp / "docs")
"""


def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("The fox found the grapes sour.\n")
    script = tmp_path / "build_it.py"
    repo = str(Path(__file__).resolve().parents[3])
    script.write_text(SCRIPT.format(repo=repo, tmp=str(tmp_path)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert 'if __name__ == "__main__":' in last, done.stderr[-2000:]
