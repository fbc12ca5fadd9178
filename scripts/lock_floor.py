"""Keep the lock installable on the oldest Python adrap supports (scripts/lock.sh, make lock).

The lock is made in whatever venv runs ``make lock``, so a release that needs a newer Python than
``requires-python``'s floor can slip in (soupsieve 3.x needs 3.11.5: Debian bookworm's python3,
and the image's, is 3.11.2, where ``make demo`` then fails to resolve). Usage::

    python scripts/lock_floor.py check   # the installed releases the floor cannot install, exit 1
    python scripts/lock_floor.py floor   # print the floor (e.g. 3.11.0)

lock.sh replaces each one it names by the newest release that the floor can install.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterable
from importlib.metadata import Distribution, distributions
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def floor(pyproject: Path = PYPROJECT) -> Version:
    """Return the lowest Python ``requires-python`` admits (``>=3.11`` -> 3.11.0)."""
    spec = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["requires-python"]
    lows = [Version(s.version) for s in SpecifierSet(spec) if s.operator in (">=", "~=", "==")]
    if not lows:
        raise SystemExit(f"requires-python {spec!r} in {pyproject} has no lower bound: add one")
    low = max(lows)
    return Version(".".join(str(p) for p in (*low.release, 0, 0)[:3]))


def too_new(python: Version, dists: Iterable[Distribution]) -> list[tuple[str, str, str]]:
    """Return (name, version, Requires-Python) of the ``dists`` that ``python`` cannot install."""
    bad = []
    for dist in dists:
        requires = dist.metadata.get("Requires-Python")  # type: ignore[attr-defined]  # a Message
        if not requires:
            continue
        try:
            ok = python in SpecifierSet(requires)
        except InvalidSpecifier:
            continue  # pip ignores a malformed Requires-Python too
        if not ok:
            bad.append((dist.metadata["Name"], dist.version, requires))
    return sorted(bad)


def main(argv: list[str]) -> int:
    low = floor()
    if argv == ["floor"]:
        print(low)
        return 0
    if argv != ["check"]:
        print(__doc__, file=sys.stderr)
        return 2
    bad = too_new(low, distributions())
    for name, version, requires in bad:
        print(f"{name}=={version}")
        print(f"  {name} {version} needs Python {requires}, below the floor {low}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
