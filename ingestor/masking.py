"""Credentials kept out of what adrap prints: the user-info part of URLs in any text.

No pydantic here: the CLI masks its log lines without loading the settings' machinery.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["mask_credentials", "mask_tree"]

#: ``scheme://user:password@`` or ``scheme://token@`` in any text.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def mask_credentials(text: str) -> str:
    """Return ``text`` with the user-info part of every URL replaced by ``***@``."""
    return _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)


def mask_tree(data: Any) -> Any:
    """Return ``data`` (JSON-like) with :func:`mask_credentials` applied to every string."""
    if isinstance(data, dict):
        return {k: mask_tree(v) for k, v in data.items()}
    if isinstance(data, list):
        return [mask_tree(v) for v in data]
    if isinstance(data, str):
        return mask_credentials(data)
    return data
