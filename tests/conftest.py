"""Shared fixtures: a clean ADRAP_* environment for every test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DATA = SHARED / "data"


@pytest.fixture(autouse=True)
def clean_environ(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Strip ADRAP_* variables so a developer's shell never changes a test's outcome.

    The user's trees and settings file (XDG data and config homes) are empty folders of the test.
    """
    for key in list(os.environ):
        if key.startswith("ADRAP_"):
            monkeypatch.delenv(key)
    xdg = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_DATA_HOME", str(xdg / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return
