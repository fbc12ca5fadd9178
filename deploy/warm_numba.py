"""Run one small tree build and one update so numba's JIT cache (UMAP, pynndescent) is written.

Without it the first build compiles UMAP: ~20 s of `make demo`'s 23 s for 20 leaves, and ~80 s
before the first tree is ready at every container start on 2 cores.

    python deploy/warm_numba.py             # numba's default cache (the venv's __pycache__)
    python deploy/warm_numba.py CACHE_DIR   # the image: baked into CACHE_DIR, which the
                                            # entrypoint copies to the writable NUMBA_CACHE_DIR

Runs the ``adrap`` beside this Python, on a throwaway tree in a temporary folder; the caller's
ADRAP_* settings are left out, so no store of theirs is touched.
"""

import contextlib
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = [
    "river",
    "mountain",
    "archive",
    "treaty",
    "harvest",
    "engine",
    "orbit",
    "lantern",
    "meadow",
    "ledger",
    "violin",
    "glacier",
    "harbor",
    "census",
    "pepper",
    "falcon",
    "quarry",
    "ballot",
    "canyon",
    "comet",
    "furnace",
    "island",
    "jasmine",
    "kettle",
    "lagoon",
    "marble",
    "nectar",
    "oyster",
    "prairie",
    "quartz",
    "saddle",
    "thunder",
    "umbrella",
    "velvet",
    "walnut",
    "yeast",
]

with tempfile.TemporaryDirectory() as tmp:
    docs = Path(tmp, "docs")
    docs.mkdir()
    rng = random.Random(0)
    for i in range(40):
        topic = rng.sample(WORDS, 4)
        sentences = [
            " ".join(rng.choice(topic + WORDS[:8]) for _ in range(12)).capitalize() + "."
            for _ in range(30)
        ]
        Path(docs, f"doc{i:02d}.txt").write_text(" ".join(sentences))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
    env["ADRAP_STATE_DIR"] = str(Path(tmp, "state"))
    if len(sys.argv) > 1:
        env["NUMBA_CACHE_DIR"] = sys.argv[1]
    adrap = str(Path(sys.executable).parent / "adrap")
    done = subprocess.run([adrap, "build", str(docs)], env=env, capture_output=True, text=True)
    if done.returncode == 0:  # an update places new nodes through the stored UMAPs (transform)
        extra = Path(docs, "doc99.txt")
        extra.write_text(" ".join(Path(docs, "doc00.txt").read_text().split()[:200]))
        done = subprocess.run([adrap, "add", str(extra)], env=env, capture_output=True, text=True)
    if done.returncode == 0 and len(sys.argv) == 1:
        # adrap writes under umask 077: the machine code (no secret) is made readable by every
        # account, whose daemon seeds its own cache from it (ingestor/cluster/numba_cache.py)
        from ingestor.cluster.numba_cache import package_dirs

        for package in package_dirs():
            for cached in (package / "__pycache__").glob("*.nb[ic]"):
                with contextlib.suppress(OSError):
                    cached.chmod(0o644)
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
        print(
            f"warm_numba: {' '.join(done.args[:2])} of a throwaway tree failed "
            f"({done.returncode}); the first build will compile UMAP instead",
            file=sys.stderr,
        )
    sys.exit(done.returncode)
