"""Run one small tree build and one update at image build time so numba's JIT cache (UMAP,
pynndescent) is baked in.

Without it every container start compiles UMAP again: ~80 s before the first tree is ready on
2 cores. The entrypoint copies the cache to the writable NUMBA_CACHE_DIR (/tmp) at start.
"""

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
    env = {
        "ADRAP_STATE_DIR": str(Path(tmp, "state")),
        "PATH": "/opt/adrap/bin:/usr/bin:/bin",
        "NUMBA_CACHE_DIR": sys.argv[1],
    }
    rc = subprocess.call(["adrap", "build", str(docs)], env=env)
    if rc == 0:  # an update places new nodes through the stored UMAPs (UMAP.transform)
        extra = Path(docs, "doc99.txt")
        extra.write_text(" ".join(Path(docs, "doc00.txt").read_text().split()[:200]))
        rc = subprocess.call(["adrap", "add", str(extra)], env=env)
    sys.exit(rc)
