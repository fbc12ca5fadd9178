"""`adrap build`, `status` and `query` over a share holding file names that are not UTF-8."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from ingestor.cli import main
from ingestor.read.names import fs_name


def write_raw(folder: Path, name: bytes, text: str) -> None:
    with open(os.fsencode(folder) + b"/" + name, "w", encoding="utf-8") as f:
        f.write(text)


def test_build_status_and_query_show_undecodable_names_escaped_and_reversible(
    corpus: Path,
) -> None:
    write_raw(corpus, b"caf\xe9 notes.txt", "The heron waits by the reed bed at dawn.\n")
    write_raw(corpus / "it", b"r\xe9sum\xe9.md", "The otter slides into the cold river.\n")
    write_raw(corpus, b"bad\xff.xyz", "an unsupported file\n")
    (corpus / "a\\xe9.txt").write_text("A badger digs its sett under the old oak.\n")  # real "\"
    runner = CliRunner()
    built = runner.invoke(main, ["build", str(corpus), "--no-progress"])
    assert built.exit_code == 0, built.output
    status = runner.invoke(main, ["status", "--json"])
    assert status.exit_code == 0, status.output
    out = json.loads(status.output)
    assert out["documents"] == 5  # fox, crow, café, résumé, the backslash name
    skipped = {row["source"] for row in out["unread"]["skipped_files"]}
    assert skipped == {"huge.txt", "bad\\xff.xyz"}
    found = runner.invoke(main, ["query", "heron reed bed dawn", "--json"])
    assert found.exit_code == 0, found.output
    sources = {s for hit in json.loads(found.output)["hits"] for s in hit["sources"]}
    assert {"caf\\xe9 notes.txt", "it/r\\xe9sum\\xe9.md", "a\\\\xe9.txt"} <= sources
    on_disk = os.fsdecode(os.fsencode(corpus) + b"/caf\xe9 notes.txt")
    only = runner.invoke(main, ["query", "heron reed", "--json", "--source", on_disk])
    assert only.exit_code == 0, only.output
    hits = json.loads(only.output)["hits"]
    assert hits
    assert {hit["source"] for hit in hits} == {"caf\\xe9 notes.txt"}
    for source, raw in [
        ("caf\\xe9 notes.txt", b"caf\xe9 notes.txt"),
        ("it/r\\xe9sum\\xe9.md", b"it/r\xe9sum\xe9.md"),
        ("a\\\\xe9.txt", b"a\\xe9.txt"),
    ]:
        assert os.fsencode(corpus / fs_name(source)) == os.fsencode(corpus) + b"/" + raw
