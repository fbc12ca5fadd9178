"""Helpers for the deployment tests: the deploy/ folder and its YAML files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ingestor.config import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Build Settings from exactly these ADRAP_* variables (unknown names fail, like the CLI)."""
    for key, value in env.items():
        if key.startswith("ADRAP_"):
            monkeypatch.setenv(key, str(value))
    return Settings(_env_file=None)  # type: ignore[call-arg]
