"""Invalid settings as one line each: the variable, the value given, what is wrong, an example."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ingestor.config import Settings
from ingestor.masking import mask_credentials

#: A setting that takes JSON only where a list is a whole section (``ADRAP_READ='{...}'``).
_FIELD_IN_SETTINGS_ERROR = re.compile(r'field "(?P<name>[^"]+)"')


def describe_validation_error(exc: ValidationError) -> str:
    """Return one line per invalid setting: ``ADRAP_X__Y='value': what is wrong; e.g. ADRAP_X__Y=1``.

    Secrets are never echoed; credentials in URLs are masked.
    """
    lines = []
    for error in exc.errors(include_url=False):
        loc = tuple(str(p) for p in error["loc"])
        field = _field(loc)
        message = error["msg"].removeprefix("Value error, ")
        if field is None and isinstance(error["input"], dict):
            # a section's own check (e.g. chunk overlap against max_tokens): name what was set
            given = ", ".join(
                f"{_env((*loc, k))}={_shown(v, _field((*loc, k)))}"
                for k, v in error["input"].items()
                if not isinstance(v, dict)
            )
            lines.append(f"{given or _env(loc)}: {message}")
            continue
        if field is None and error["type"] == "extra_forbidden":
            lines.append(
                f"{_env(loc)}={_shown(error['input'], None)}: not a setting; "
                "deploy/.env.example lists every one"
            )
            continue
        example = _example(field)
        hint = f"; e.g. {_env(loc)}={example}" if example else ""
        lines.append(f"{_env(loc)}={_shown(error['input'], field)}: {message}{hint}")
    return mask_credentials("\n".join(lines))


def describe_settings_error(exc: Exception) -> str:
    """Return one line for a value pydantic-settings could not decode (a section given as JSON)."""
    match = _FIELD_IN_SETTINGS_ERROR.search(str(exc))
    name = match.group("name") if match else "?"
    return (
        f"ADRAP_{name.upper()}: {exc}; set its fields one by one instead, e.g. "
        f"ADRAP_{name.upper()}__<FIELD>=<value> (deploy/.env.example lists them)"
    )


def _env(loc: tuple[str, ...]) -> str:
    return "ADRAP_" + "__".join(loc).upper()


def _field(loc: tuple[str, ...]) -> FieldInfo | None:
    """Return the field at ``loc`` in Settings, or None (a section, or not a setting)."""
    model: type[BaseModel] = Settings
    field: FieldInfo | None = None
    for name in loc:
        field = model.model_fields.get(name)
        if field is None:
            return None
        inner = _model_of(field)
        if inner is not None:
            model = inner
    return field if field is not None and _model_of(field) is None else None


def _model_of(field: FieldInfo) -> type[BaseModel] | None:
    ann = field.annotation
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _shown(value: Any, field: FieldInfo | None) -> str:
    if field is not None and SecretStr in _types(field.annotation):
        return "'***'"
    return repr(value) if isinstance(value, str) else repr(str(value))


def _types(annotation: Any) -> set[Any]:
    args = typing.get_args(annotation)
    return {annotation} if not args else {annotation, *args}


def _example(field: FieldInfo | None) -> str | None:
    """Return a valid value of ``field`` as it is written in the environment (its default)."""
    if field is None:
        return None
    if field.examples:
        return str(field.examples[0])
    default = field.get_default(call_default_factory=True)
    if default is PydanticUndefined or default is None:
        types = _types(field.annotation)
        for kind, text in ((bool, "true"), (int, "2"), (float, "1.5"), (str, "text")):
            if kind in types:
                return text
        return None
    if isinstance(default, SecretStr):
        return None
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, list | tuple):
        return ",".join(str(v) for v in default) or "a,b"
    if isinstance(default, Path):
        return str(default)
    return str(default)
