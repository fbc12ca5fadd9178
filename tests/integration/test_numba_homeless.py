"""A service account without a home (``useradd -r -M``) running the daemon over a tree installed
by root: numba may write neither beside the installed packages nor in a user cache, and
``import umap`` failed ("cannot cache function 'rdist': no locator available"), so the daemon
died at its first build. The CLI now keeps numba's cache in the tree's state dir, seeded from the
installed one (nothing compiled again). Run as ``nobody`` with a home that does not exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ingestor.cluster.numba_cache import CACHE_DIR, numba_can_cache

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
SCRIPT = """
import os, sys
from pathlib import Path
from ingestor.cluster.numba_cache import use_state_dir_cache
state = Path(sys.argv[1])
if sys.argv[2] == "fixed":
    use_state_dir_cache(state, create=True)
from ingestor.cluster.umap_reduce import load_umap
load_umap()
print("NUMBA_CACHE_DIR", os.environ.get("NUMBA_CACHE_DIR"))
"""


@pytest.mark.integration
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run as an account without a home",
)
def test_an_account_without_a_home_keeps_numba_s_cache_in_the_state_dir() -> None:
    base = Path(tempfile.mkdtemp(prefix="adrap-homeless-"))
    try:
        base.chmod(0o755)
        state = base / "state"
        state.mkdir()
        os.chown(state, NOBODY, NOBODY)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ADRAP_", "NUMBA_"))}
        env |= {"HOME": "/nonexistent", "PYTHONPATH": str(REPO)}
        env.pop("XDG_CACHE_HOME", None)

        # nobody, who may read and pass through every folder (CI's interpreter sits under a
        # private home: without it the test skipped there) but writes only where nobody may
        nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                  "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]  # fmt: skip

        def child(mode: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*nobody, sys.executable, "-c", SCRIPT, str(state), mode],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip

        reach = subprocess.run(
            [*nobody, sys.executable, "-c", "import ingestor.cluster.numba_cache"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if reach.returncode != 0:  # the interpreter or the checkout is not nobody's to read
            pytest.skip(f"nobody cannot run this checkout's Python: {reach.stderr[-300:]}")
        before = child("as before")
        if before.returncode == 0:  # numba found a place after all (a writable install)
            pytest.skip("this installation lets nobody write numba's cache; nothing to show")
        assert "no locator available" in before.stderr, before.stderr[-2000:]
        done = child("fixed")
        assert done.returncode == 0, done.stderr[-4000:]
        assert f"NUMBA_CACHE_DIR {state / CACHE_DIR}" in done.stdout
        assert list((state / CACHE_DIR).rglob("*.nbi")), "seeded from the installed cache"
        assert numba_can_cache(), "this process (root) needs no such folder"
    finally:
        shutil.rmtree(base, ignore_errors=True)
