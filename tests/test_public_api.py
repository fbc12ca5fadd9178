"""Packages expose exactly their ``__all__``; other packages import only those names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import models_store
import retriever

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", [retriever, models_store])
def test_every_name_in_all_exists(module: object) -> None:
    for name in module.__all__:  # type: ignore[attr-defined]
        assert hasattr(module, name), name


def _imports_from(path: Path, package: str) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == package
        ):
            out.extend((node.module, a.name) for a in node.names)
    return out


def test_ingestor_imports_only_public_names_of_models_store() -> None:
    bad = [
        (str(p.relative_to(ROOT)), mod, name)
        for p in (ROOT / "ingestor").rglob("*.py")
        for mod, name in _imports_from(p, "models_store")
        if mod != "models_store" or name not in models_store.__all__
    ]
    assert bad == []


def test_payload_keys_are_written_only_in_the_schema() -> None:
    """A payload key as a string literal outside retriever/schema.py is a review bug."""
    keys = {"layer", "parents", "children", "sources", "source_dirs", "n_tokens", "node_id", "tree"}
    offenders = []
    for pkg in ("ingestor", "retriever"):
        for p in (ROOT / pkg).rglob("*.py"):
            if p.name == "schema.py":
                continue
            for node in ast.walk(ast.parse(p.read_text())):
                if (
                    isinstance(node, ast.Subscript)
                    and isinstance(node.slice, ast.Constant)
                    and node.slice.value in keys
                ):
                    offenders.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
