"""Text handling is linear on hostile text (issue 57, item 3): every regular expression of
``ingestor.read`` (found by walking the package, so a pattern added later is checked too) and the
readers that run them are fed the classic worst cases: long runs of each punctuation, closer,
dash and space character, alternations such as ``)]`` repeated, a 200 KB ``[[[...]]]`` JSON, a
10 MB single line, and the inputs that made a reader rescan (``<a`` repeated, unclosed ``**``).

Sizes are picked so that linear work takes well under a second while a quadratic pattern needs
minutes and a cubic one years (1,500 ``)`` cost the old sentence splitter 10 s; these inputs are
100 times longer). Nothing here measures speed: :func:`hang_guard` only stops a run that is still
going after a delay no linear pass comes near, so the test fails instead of hanging the suite.
"""

from __future__ import annotations

import importlib
import io
import json
import pkgutil
import re
import signal
import string
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import pytest

import ingestor.read
from ingestor.read.chunking import chunk_text
from ingestor.read.formats import extract, extract_text
from ingestor.read.htmltext import html_to_text
from ingestor.read.office import clean_markdown
from ingestor.read.sentences import soft_breaks, split_sentences, split_units
from ingestor.read.structure import Outline, merge_locators
from testkit.fakes import ByteTokenizer

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM")

N = 100_000  # characters of each hostile input to a pattern
# ... and to a reader: it loops in Python per match, so at this size a quadratic one runs for
# minutes already
N_READER = 20_000
GUARD_SECONDS = 60.0

# Patterns searched only within a bounded window of their input: fed inputs of that size.
BOUNDED = {
    "ingestor.read.textfile._HTML_CHARSET": 1024,  # the HTML charset prescan's 1024 bytes
    "ingestor.read.sentences._WORD_BEFORE": 64,  # the 30 characters before a period
}

CLOSERS = "\"')]}\u201d\u2019\u00bb\u300d\u300f\u3011\u300b"
OPENERS = "\"'([{\u201c\u2018\u00ab"
RUN_CHARS = sorted(
    set(string.punctuation)
    | set(" \t\n\r\x0b\x0c\xa0\u3000\u2028\u2014\u2013\u2026\u3002\uff01\uff1f")
    | set(CLOSERS + OPENERS)
    | set("a1_\u00e9")
)
UNITS = [
    ")]", "]]", "[]", ",)", ", ", ",) ", ". ", ".)", ".) ", "a.", "A. ", "e.g. ", "\u3002)",
    "**", "**a", "** ", "![", "![a", "![a](", "](", "<!--", "<!-- ", "-->", "--", " -- ",
    " \u2014 ", "\u2014a", "# ", "#\t", "# a ", "| ", "|-", "| |", "|---", "---|", ":-", " -",
    "- ", "* ", "\n ", " \n", "\n\n", "\n\n ", "\n \n", "\\\\", "\\x", "\\x4", "<meta",
    "<meta charset=", "charset= ", "<a", "</", "<!", "<?", "<![CDATA[", "<![if", "]>", "] ]",
    "&#", "a!b", "!a", "!A1", "'\n", '",', "\n'", ', "', "a\n", "x\x01", "Sheet!", "A1:",
]  # fmt: skip


def hostile_texts(size: int = N) -> Iterator[str]:
    """Runs of each character and unit, ending at the end or before an ``x``, and the shapes
    that made a pattern retry its tail (a heading title followed by spaces, an unclosed mark)."""
    for char in RUN_CHARS:
        yield char * size
        yield char * size + "x"
    for unit in UNITS:
        yield unit * (size // len(unit))
    half = size // 2
    yield from [
        "# a" + " " * size + "b",
        "# a" + " #" * half + "b",
        "|" + " " * size + "x",
        "| |" + " " * size + "x",
        "---" + " " * size + "x",
        "|---|" + " " * size + "x",
        "[" * half + "]" * half,
        "**a" + "b" * size,
        "<!--" + "a" * size,
        "![a" + "b" * size,
        "![a](" + "b" * size,
        "<meta charset=" + " " * size + "!",
        "!" * half + "A" * half,
        "a" * size + "!A1:B" + "1" * half,
    ]


def read_patterns() -> dict[str, re.Pattern[str] | re.Pattern[bytes]]:
    """Every compiled pattern at the top level of a module of ``ingestor.read``, by name."""
    found: dict[int, tuple[str, re.Pattern[str] | re.Pattern[bytes]]] = {}
    for info in sorted(pkgutil.iter_modules(ingestor.read.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"ingestor.read.{info.name}")
        for attr, value in sorted(vars(module).items()):
            if isinstance(value, re.Pattern):
                found.setdefault(id(value), (f"{module.__name__}.{attr}", value))
    return dict(found.values())


class Hung(Exception):
    """Raised by :func:`hang_guard` in the code it guards."""


@contextmanager
def hang_guard(what: str, seconds: float = GUARD_SECONDS) -> Iterator[None]:
    """Stop the block with :class:`Hung` if it still runs after ``seconds``: a guard against a
    super-linear hang (the regular expression engine checks for signals), not a speed test."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"{what} still running after {seconds:.0f} s: super-linear on hostile text")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


PATTERNS = read_patterns()


def test_the_package_patterns_are_all_found() -> None:
    assert {
        "ingestor.read.sentences._SOFT_BREAK",
        "ingestor.read.sentences.HEADING",
        "ingestor.read.office._BOLD",
        "ingestor.read.htmltext._MARKUP",
    } <= set(PATTERNS)
    assert set(BOUNDED) <= set(PATTERNS)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_read_pattern_is_linear_on_the_classic_worst_cases(name: str) -> None:
    pattern = PATTERNS[name]
    size = BOUNDED.get(name, N)
    with hang_guard(name):
        for text in hostile_texts(size):
            if name in BOUNDED:
                text = text[:size]
            # subn: every match, scanned as finditer scans, without a Python step per match
            if isinstance(pattern.pattern, bytes):
                data = text.encode("latin-1", "replace")
                pattern.subn(b"", data)  # type: ignore[arg-type]
                pattern.fullmatch(data)  # type: ignore[arg-type]
            else:
                pattern.subn("", text)  # type: ignore[arg-type]
                pattern.fullmatch(text)  # type: ignore[arg-type]


TextReader = Callable[[str], object]
READERS: dict[str, TextReader] = {
    "split_sentences": split_sentences,
    "split_units": split_units,
    "soft_breaks": soft_breaks,
    "clean_markdown": clean_markdown,
    "html_to_text": html_to_text,
    "Outline": Outline,
    "merge_locators": lambda text: merge_locators("S!" + text, "S!" + text + "1"),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_text_readers_are_linear_on_the_classic_worst_cases(reader: str) -> None:
    with hang_guard(reader):
        for text in hostile_texts(N_READER):
            READERS[reader](text)


def test_a_run_of_closing_brackets_is_split_at_once() -> None:
    """The case that froze the daemon: ``)`` and ``]`` runs cost the old splitter cubic time."""
    with hang_guard("soft_breaks"):
        assert soft_breaks(")" * N) == []
        assert soft_breaks(")]" * N + " x") == [2 * N]
        assert soft_breaks("a, b) c") == [2, 5]


def test_a_10_mb_single_line_is_chunked_in_linear_time() -> None:
    line = ")]" * 5_000_000
    with hang_guard("chunk_text of a 10 MB line"):
        chunks = chunk_text(line, max_tokens=250, overlap=50, tokenizer=ByteTokenizer())
    assert (chunks[0].char_start, chunks[-1].char_end) == (0, len(line))


def test_a_200_kb_nested_json_array_is_read_and_chunked_in_linear_time() -> None:
    data = ("[" * 100_000 + "]" * 100_000).encode()
    with hang_guard("reading and chunking [[[...]]]"):
        text = extract_text(data, "deep.json", ".json")  # too deep to parse: read as text
        chunks = chunk_text(text, tokenizer=ByteTokenizer())
    assert text == data.decode()
    assert chunks[-1].char_end == len(text)


@pytest.mark.parametrize("unit", ["<a", "</", "<?", "<!", "<!-- ->", "<![CDATA[>"])
def test_html_of_unclosed_markup_is_read_in_linear_time(unit: str) -> None:
    html = unit * (2 * N // len(unit))
    with hang_guard(f"html_to_text of {unit!r} repeated"):
        text = html_to_text(html)
    assert text == html  # nothing closes: all of it reads as text, as it did before


def test_an_epub_chapter_of_unclosed_markup_is_read_in_linear_time() -> None:
    """markitdown parses each chapter with the same HTMLParser: it gets the defused chapter."""
    from tests.unit.read.test_formats import make_epub

    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(make_epub())) as source,
        zipfile.ZipFile(buffer, "w") as archive,
    ):
        for info in source.infolist():
            hostile = "<html><body><p>heron</p>" + "<a" * N
            archive.writestr(info, hostile if info.filename == "c1.xhtml" else source.read(info))
    with hang_guard("the EPUB converter on '<a' repeated"):
        text = extract_text(buffer.getvalue(), "birds.epub", ".epub")
    assert "heron" in text


def test_an_unknown_marked_section_in_html_is_a_comment_not_a_crash() -> None:
    assert html_to_text("<p>before<![foo[ x ]]>after</p>") == "beforeafter"
    assert html_to_text("<p>a<![ b</p>") == "a"  # a bogus comment to the next ">", as HTML5


def test_a_csv_line_that_made_the_delimiter_sniffer_backtrack_is_read_at_once() -> None:
    """csv.Sniffer's double-quote pattern is quartic in a line's length: 400 bytes took 149 s."""
    data = (',"a",\n' + '"' * 8000 + "a\n").encode()
    with hang_guard("read_csv"):
        parts = extract(data, "quotes.csv", ".csv").parts
    assert parts[0].text == "|  | a |  |"


def test_deeply_nested_json_is_written_compact_not_indented_per_level() -> None:
    """Indenting ``[[[...]]]`` 900 deep wrote 1.6 MB of spaces for 1.8 KB of JSON."""
    value = json.loads("[" * 900 + "1" + "]" * 900)
    parts = extract(json.dumps([value, {"bird": "heron"}]).encode(), "deep.json", ".json").parts
    assert parts[0].text == "[" * 900 + "1" + "]" * 900
    assert parts[1].text == '{\n  "bird": "heron"\n}'  # shallow values stay pretty-printed
