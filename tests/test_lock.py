"""The lock (constraints.txt) installs on the oldest Python pyproject.toml allows.

Debian bookworm's python3, and the image's, is 3.11.2: a locked release that needs 3.11.5 made
``make demo`` fail to resolve there (soupsieve 4.1.3).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from email.message import Message
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from types import ModuleType

import pytest
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;]+)\s*$")


def _lock_floor() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_floor", REPO / "scripts" / "lock_floor.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lock_floor = _lock_floor()


class _Dist:
    """Just what ``too_new`` reads of a distribution."""

    def __init__(self, name: str, version: str, requires: str | None) -> None:
        self.metadata = Message()
        self.metadata["Name"] = name
        if requires is not None:
            self.metadata["Requires-Python"] = requires
        self.version = version


def test_the_floor_is_requires_pythons_lower_bound(tmp_path: Path) -> None:
    assert lock_floor.floor() == Version("3.11.0")
    project = tmp_path / "pyproject.toml"
    project.write_text('[project]\nrequires-python = ">=3.10.4, <4"\n', encoding="utf-8")
    assert lock_floor.floor(project) == Version("3.10.4")
    project.write_text('[project]\nrequires-python = "<4"\n', encoding="utf-8")
    with pytest.raises(SystemExit, match="no lower bound"):
        lock_floor.floor(project)


def test_too_new_names_the_releases_the_floor_cannot_install() -> None:
    dists = [
        _Dist("soupsieve", "4.1.3", ">=3.11.5"),
        _Dist("numpy", "2.3.0", ">=3.11"),
        _Dist("old", "1.0", None),
        _Dist("odd", "1.0", "not a specifier"),
    ]
    bad = lock_floor.too_new(Version("3.11.2"), dists)
    assert bad == [("soupsieve", "4.1.3", ">=3.11.5")]
    assert lock_floor.too_new(Version("3.11.5"), dists) == []


def test_every_locked_release_installs_on_the_oldest_supported_python() -> None:
    pins = [
        m.groups()
        for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if (m := PIN.match(line))
    ]
    checked = []
    for name, version in pins:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # an extra this venv does not install (frameworks)
        if Version(dist.version).public == Version(version).public:
            checked.append(dist)
    assert len(checked) > 100, f"only {len(checked)} locked releases are installed here"
    floor = lock_floor.floor()
    assert lock_floor.too_new(floor, checked) == [], (
        f"constraints.txt locks releases that Python {floor} cannot install: run `make lock`, "
        "which replaces them (scripts/lock_floor.py)"
    )
