"""What the CLI prints of a share is shown, never acted on by the terminal: a file named with a
newline forged a record line of ``adrap changes`` (and of ``adrap status``, ``adrap query``), and
an escape sequence in a document's text (a window title, a clipboard write) reached the terminal
of whoever ran ``adrap query``. Run with ``color=True``: nothing stripped, as on a terminal."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from click.testing import CliRunner

from ingestor.cli import main
from ingestor.cli.app import MaskingFormatter

FORGED = "2026-11-30 09:00:00  update      +forged.md  (leaves +1 -0; 0 summaries)"
NAME = f"evil\n{FORGED}\x1b[2J\u202eexe.txt"
OSC = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # a clipboard write, in the text
#: What a terminal acts on (tab and newline are the output's own lines).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), color=True)
    assert result.exit_code in (0, 3), result.output
    return result.output


def test_names_and_texts_from_the_share_are_escaped(built: Path) -> None:
    tale = "The owl sat in the hollow oak all night and watched the fox below. " * 6
    (built / "fables" / NAME).write_text(f"{tale}It hid a secret {OSC} in the hollow oak.\n")
    (built / "it" / ("bin\n" + FORGED)).write_bytes(b"\x00\x01binary\x00" * 20)  # skipped
    _run("add", str(built / "fables"), str(built / "it"))
    changes = _run("changes", "--since", "1h")
    query = _run("query", "owl hollow oak secret", "--max-tokens", "400")
    status = _run("status")
    for out in (changes, query, status):
        own = out.replace("\x1b[1m", "").replace("\x1b[0m", "")  # the CLI's own bold
        assert not CONTROL.search(own), repr(out)
        assert not any(line.startswith(FORGED) for line in out.splitlines()), out
    assert "+fables/evil\\n2026-11-30" in changes
    assert "\\x1b[2J\\u202eexe.txt" in changes
    assert "\\x1b]52;c;" in query
    assert "it/bin\\n2026-11-30" in status  # the skipped file, listed


def test_a_terminals_log_lines_escape_the_message() -> None:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "applied %s", (NAME,), None)
    line = MaskingFormatter("%(levelname)s %(message)s").format(record)
    assert "\n" not in line
    assert not CONTROL.search(line)
    assert line.startswith("INFO applied evil\\n2026")
