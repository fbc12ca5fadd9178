"""Spies on a method: what it returned, without changing it."""

from __future__ import annotations

from typing import Any

import pytest


def spy_found(monkeypatch: pytest.MonkeyPatch, obj: object, name: str) -> list[bool]:
    """Wrap ``obj.name`` for the test; the list fills with whether each call returned something
    (not None)."""
    seen: list[bool] = []
    inner = getattr(obj, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = inner(*args, **kwargs)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(obj, name, spy)
    return seen
