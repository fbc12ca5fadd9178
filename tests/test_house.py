"""House rules checked on every run (issue 36): no module over 600 lines (~400 is a hint to look for
a seam, never a reason to split what is one concept, issue 54), and no private name used
across modules (``from m import _x``, or ``obj._x`` where ``_x`` is defined in another module of
ours). Import cycles between the modules of a package are import-linter's (``acyclic_siblings``)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ingestor", "retriever", "models_store")
MAX_LINES = 600


def modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these along a seam: {long}"


def test_no_private_name_is_used_across_modules() -> None:
    trees = {p: ast.parse(p.read_text()) for p in modules()}
    defined: dict[str, set[Path]] = defaultdict(set)
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                name = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                name = node.id
            else:
                continue
            if _private(name):
                defined[name].add(path)
    bad = []
    for path, tree in trees.items():
        where = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                bad += [
                    f"{where}:{node.lineno}: imports {a.name}"
                    for a in node.names
                    if _private(a.name)
                ]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                homes = defined.get(node.attr)
                if homes and path not in homes:
                    bad.append(
                        f"{where}:{node.lineno}: uses {node.attr} of {sorted(map(str, homes))}"
                    )
    assert bad == [], "\n".join(bad)
