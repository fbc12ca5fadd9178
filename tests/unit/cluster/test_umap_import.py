"""UMAP imported in a process whose warnings are errors (``-W error``, pytest's own filter).

umap's package init warns that TensorFlow is missing; under such a filter that warning aborted
the import half-way. Unpickling a stored UMAP then read as an incompatible model (refitted for
nothing), and the ``umap`` imported next had lost its submodules' attributes, so the next
clustering failed with ``module 'umap' has no attribute 'umap_'`` (seen in the integration suite
when a model-loading test ran before a build on the same worker).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run_strict(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where every warning is an error."""
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code, *args],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_stored_umap_is_read_where_warnings_are_errors(tmp_path: Path) -> None:
    from ingestor.cluster.umap_reduce import load_umap

    (tmp_path / "model").write_bytes(pickle.dumps(load_umap().UMAP(n_neighbors=7)))
    done = run_strict(
        "import sys\n"
        "from pathlib import Path\n"
        "from ingestor.tree.rowmap import loads_model\n"
        "model = loads_model(Path(sys.argv[1]).read_bytes(), 'the layer 1 UMAP')\n"
        "print(type(model).__name__, model.n_neighbors)\n"
        "import umap\n"
        "print(umap.umap_.UMAP is type(model))\n",
        str(tmp_path / "model"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["UMAP", "7", "True"]


def test_clustering_imports_umap_after_an_import_that_failed_half_way() -> None:
    done = run_strict(
        "try:\n"
        "    import umap.umap_\n"
        "except ImportWarning:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('the failed import this test repairs did not happen')\n"
        "from ingestor.cluster.umap_reduce import load_umap\n"
        "umap = load_umap()\n"
        "print(umap.umap_.UMAP.__name__, umap.layouts.__name__)\n"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["UMAP", "umap.layouts"]
