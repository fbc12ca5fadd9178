"""What the Dockerfile copies is in the build context: tracked, and let through by .dockerignore.

The image build (tests/deploy/test_image.py) is slow and needs podman; this catches the commonest
way to break it in the fast suite: a new ``COPY`` source that .dockerignore's allow-list filters
out (constraints.txt was, and no image could be built).
"""

from __future__ import annotations

import fnmatch
import shlex
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[2]


def copy_sources(dockerfile: Path) -> list[str]:
    """Return the context paths of the Dockerfile's ``COPY`` lines (not ``--from`` a stage)."""
    sources: list[str] = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        if not line.upper().startswith("COPY "):
            continue
        words = shlex.split(line)
        args = words[1:]
        if any(a.startswith("--from") for a in args):
            continue
        args = [a for a in args if not a.startswith("--")]
        sources.extend(a.rstrip("/") for a in args[:-1])
    return sources


def ignored(path: str, patterns: list[str]) -> bool:
    """Return True if .dockerignore's ``patterns`` leave ``path`` out of the build context.

    Docker's rules for the patterns used here: the last pattern that matches the path or one of
    its parent folders decides; ``!`` lets it back in; ``**`` spans folders.
    """
    parts = PurePosixPath(path).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    out = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.removeprefix("!").strip("/")
        variants = {pattern, pattern.removeprefix("**/")}
        if any(fnmatch.fnmatchcase(c, v) for c in candidates for v in variants):
            out = not negate
    return out


def dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [s for line in lines if (s := line.strip()) and not s.startswith("#")]


def test_the_ignore_rules_read_as_docker_reads_them() -> None:
    patterns = ["*", "!pkg/", "!keep.txt", "**/__pycache__"]
    assert ignored("other.txt", patterns)
    assert not ignored("keep.txt", patterns)
    assert not ignored("pkg/mod.py", patterns)
    assert ignored("pkg/__pycache__/mod.pyc", patterns)
    assert ignored("deploy/x", patterns)


@pytest.mark.parametrize("source", copy_sources(REPO / "deploy" / "Dockerfile"))
def test_every_copied_path_is_in_the_build_context(source: str) -> None:
    assert (REPO / source).exists(), f"the Dockerfile copies {source!r}, which the repo lacks"
    assert not ignored(source, dockerignore()), (
        f"the Dockerfile copies {source!r} but .dockerignore leaves it out of the build "
        f"context: add '!{source}' to .dockerignore"
    )


def test_the_dockerfile_copies_the_lock() -> None:
    assert "constraints.txt" in copy_sources(REPO / "deploy" / "Dockerfile")
