"""Request parameters as the HTTP routes, MCP and the CLI give them (strings, or values), read
one way everywhere: ``ValueError`` naming the parameter and the value for anything else."""

from __future__ import annotations

from collections.abc import Mapping


def int_param(params: Mapping[str, object], name: str, default: int | None) -> int | None:
    """Return ``params[name]`` as an integer (``default`` where missing or empty)."""
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        return int(str(value))
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def bounded_param(params: Mapping[str, object], name: str, default: int, high: int) -> int:
    """Return ``params[name]`` as an integer in ``1..high`` (``default`` where missing)."""
    value = int_param(params, name, default)
    assert value is not None
    if not 1 <= value <= high:
        raise ValueError(f"{name} must be between 1 and {high}, got {value}")
    return value


def flag_param(params: Mapping[str, object], name: str, default: bool) -> bool:
    """Return ``params[name]`` as a boolean (true/false/1/0; ``default`` where missing)."""
    value = params.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false", "1", "0"):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return text in ("true", "1")
