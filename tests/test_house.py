"""House rules checked on every run (issue 36): no module over 600 lines (~400 is a hint to look for
a seam, never a reason to split what is one concept, issue 54), and no private name used
across modules (``from m import _x``, or ``obj._x`` where ``_x`` is defined in another module of
ours). Import cycles between the modules of a package are import-linter's (``acyclic_siblings``).
bench/ and tests/ share helpers through testkit/ only: neither imports the other, nor puts the
other's folder on the import path, and testkit imports neither."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

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


#: Folder -> the top-level packages and folders its files may not import.
APART = {"bench": ("tests",), "tests": ("bench",), "testkit": ("bench", "tests")}


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of attributes on a name, else ''."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _is_sys_path(node: ast.AST) -> bool:
    return _dotted(node.value if isinstance(node, ast.Subscript) else node) == "sys.path"


def _path_words(values: list[ast.AST], bound: dict[str, list[ast.AST]]) -> set[str]:
    """The path components of every string in ``values``, following names to what they were
    bound to (``for p in (ROOT, ROOT / "bench"): sys.path.insert(0, str(p))``)."""
    words: set[str] = set()
    seen: set[str] = set()
    todo = list(values)
    while todo:
        for node in ast.walk(todo.pop()):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                words.update(re.split(r"[/\\:]", node.value))
            elif isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                todo += bound.get(node.id, [])
    return words


def crossings(source: str, apart: tuple[str, ...]) -> Iterator[tuple[int, str]]:
    """(line, what) for each import of a package in ``apart`` in ``source`` (at any depth, or by
    ``importlib.import_module``/``__import__``), and each ``sys.path`` change or ``PYTHONPATH``
    that names one of their folders."""
    tree = ast.parse(source)
    bound: dict[str, list[ast.AST]] = defaultdict(list)
    paths: list[tuple[int, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in apart:
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] in apart:
                yield node.lineno, f"from {node.module} import ..."
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            first = node.args[0] if node.args else None
            if (
                name.split(".")[-1] in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and str(first.value).split(".")[0] in apart
            ):
                yield node.lineno, f"{name}({first.value!r})"
            elif isinstance(node.func, ast.Attribute) and _is_sys_path(node.func.value):
                paths += [(node.lineno, arg) for arg in node.args]
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    bound[target.id].append(node.value)
                elif _is_sys_path(target) or _names_pythonpath(target):
                    paths.append((node.lineno, node.value))
        elif isinstance(node, ast.For | ast.comprehension) and isinstance(node.target, ast.Name):
            bound[node.target.id].append(node.iter)
        elif isinstance(node, ast.Dict):
            paths += [
                (getattr(value, "lineno", 0), value)
                for key, value in zip(node.keys, node.values, strict=True)
                if key is not None and _constant(key) == "PYTHONPATH"
            ]
        elif isinstance(node, ast.keyword) and node.arg == "PYTHONPATH":
            paths.append((getattr(node.value, "lineno", 0), node.value))
    for line, value in paths:
        named = sorted(_path_words([value], bound) & set(apart))
        if named:
            yield line, f"puts {', '.join(named)}/ on the import path"


def _constant(node: ast.AST) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _names_pythonpath(target: ast.AST) -> bool:
    """``env["PYTHONPATH"]`` (or ``os.environ["PYTHONPATH"]``) as an assignment's target."""
    return isinstance(target, ast.Subscript) and _constant(target.slice) == "PYTHONPATH"


def test_bench_and_tests_share_helpers_through_testkit_only() -> None:
    bad = []
    for folder, apart in APART.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            where = path.relative_to(ROOT)
            bad += [f"{where}:{line}: {what}" for line, what in crossings(path.read_text(), apart)]
    assert bad == [], "share it through testkit/ instead:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source",
    [
        "import bench.soak",
        "from bench.soak_ops import Corpus",
        "def f():\n    from bench import crash",
        "import importlib\nimportlib.import_module('bench.crash')",
        "import sys\nsys.path.insert(0, str(ROOT / 'bench'))",
        "import sys\nsys.path.append('bench')",
        "import sys\nsys.path[:0] = [str(ROOT / 'bench')]",
        "import sys\nfor p in (ROOT, ROOT / 'bench'):\n    sys.path.insert(0, str(p))",
        "import sys\nBENCH = ROOT / 'bench'\nsys.path.insert(0, str(BENCH))",
        "env = {'PYTHONPATH': str(ROOT / 'bench')}",
        "env['PYTHONPATH'] = f'{ROOT}/bench'",
        "env = dict(PYTHONPATH=str(ROOT / 'bench'))",
    ],
)
def test_a_crossing_is_found(source: str) -> None:
    assert list(crossings(source, ("bench",)))


@pytest.mark.parametrize(
    "source",
    [
        "from testkit.soak import daemon_soak",
        "import sys\nsys.path.insert(0, str(ROOT))",
        '"""bench/soak.py runs it at length."""\nBENCH = ROOT / "bench"',
        "env = {'PYTHONPATH': str(ROOT)}",
        "from .bench import x",
    ],
)
def test_what_is_not_a_crossing_is_not_found(source: str) -> None:
    assert list(crossings(source, ("bench",))) == []
