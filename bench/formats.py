"""Cost of reading each document format, against the same text as plain .txt files.

    python bench/formats.py [--files 1000]

Writes a mixed folder of ``--files`` documents (the same generated prose spread evenly over every
format: .txt, .md, .html, .csv, .json, .pdf, .docx, .pptx, .xlsx, .xls, .odt, .ods, .odp, .epub,
.ipynb, .rtf, .eml), then reads each format's files in a fresh process through
``ingestor.read.formats.extract``. Printed per format: files, MB, files/s, MB/s (of file bytes),
characters of text out, the time to read them relative to the same number of .txt files (the
floor: decoding UTF-8), the one-off import cost, and the process's peak RSS (VmHWM; a fresh
process per format). Writers: python-docx, python-pptx, openpyxl, xlwt (test extra); ODF,
EPUB, RTF, PDF and mail are written by hand or with the stdlib.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

_WORDS = [
    *("heron", "canal", "lock", "gate", "water", "level", "budget", "march", "survey", "report"),
    *("nest", "bird", "bank", "spring", "council", "meeting", "plan", "cost", "repair", "bridge"),
    *("path", "walker", "boat", "mooring", "river", "flood", "winter", "summer", "volunteer"),
    *("count", "morning", "evening", "north", "south", "east", "west", "island", "reed", "bed"),
]


def prose(rng: random.Random, paragraphs: int = 6) -> list[str]:
    """Return paragraphs of generated sentences (about 2 KB in all)."""
    out = []
    for _ in range(paragraphs):
        sentences = []
        for _ in range(rng.randint(3, 5)):
            words = rng.choices(_WORDS, k=rng.randint(8, 16))
            sentences.append(" ".join(words).capitalize() + ".")
        out.append(" ".join(sentences))
    return out


def _zip(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def _odf(body: str) -> bytes:
    ns = " ".join(
        f'xmlns:{p}="urn:oasis:names:tc:opendocument:xmlns:{u}:1.0"'
        for p, u in [
            ("office", "office"),
            ("text", "text"),
            ("table", "table"),
            ("draw", "drawing"),
            ("presentation", "presentation"),
        ]
    )
    return _zip(
        {
            "mimetype": "application/vnd.oasis.opendocument.text",
            "content.xml": f"<office:document-content {ns}><office:body>{body}"
            "</office:body></office:document-content>",
        }
    )


def _pdf(paras: list[str]) -> bytes:
    lines = [w for p in paras for w in _wrap(p, 90)]
    ops = " T* ".join("(" + line.replace("(", "").replace(")", "") + ") Tj" for line in lines)
    content = f"BT /F1 9 Tf 11 TL 40 780 Td {ops} ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n%b\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%b\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line]


def _docx(paras: list[str]) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Survey", 1)
    for para in paras:
        document.add_paragraph(para)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _pptx(paras: list[str]) -> bytes:
    import pptx

    presentation = pptx.Presentation()
    for number, para in enumerate(paras, 1):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = f"Part {number}"
        slide.placeholders[1].text = para
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def _rows(paras: list[str]) -> list[list[str]]:
    return [[str(i), *para.split(". ")[:3]] for i, para in enumerate(paras, 1)]


def _xlsx(paras: list[str]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    for row in _rows(paras):
        book.active.append(row)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _xls(paras: list[str]) -> bytes:
    import xlwt

    book = xlwt.Workbook()
    sheet = book.add_sheet("Survey")
    for r, row in enumerate(_rows(paras)):
        for c, value in enumerate(row):
            sheet.write(r, c, value)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _ods(paras: list[str]) -> bytes:
    def cell(v: str) -> str:
        return f"<table:table-cell><text:p>{v}</text:p></table:table-cell>"

    rows = "".join(
        "<table:table-row>" + "".join(map(cell, row)) + "</table:table-row>" for row in _rows(paras)
    )
    return _odf(f'<office:spreadsheet><table:table table:name="Survey">{rows}</table:table>'
                "</office:spreadsheet>")  # fmt: skip


def _odp(paras: list[str]) -> bytes:
    pages = "".join(
        f'<draw:page><draw:frame presentation:class="title"><draw:text-box><text:p>Part {i}'
        "</text:p></draw:text-box></draw:frame><draw:frame><draw:text-box>"
        f"<text:p>{para}</text:p></draw:text-box></draw:frame></draw:page>"
        for i, para in enumerate(paras, 1)
    )
    return _odf(f"<office:presentation>{pages}</office:presentation>")


def _odt(paras: list[str]) -> bytes:
    body = "".join(f"<text:p>{p}</text:p>" for p in paras)
    return _odf(f'<office:text><text:h text:outline-level="1">Survey</text:h>{body}</office:text>')


def _epub(paras: list[str]) -> bytes:
    chapter = "".join(f"<p>{p}</p>" for p in paras)
    return _zip(
        {
            "mimetype": "application/epub+zip",
            "META-INF/container.xml": '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:'
            'container" version="1.0"><rootfiles><rootfile full-path="content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
            "content.opf": '<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata '
            'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Survey</dc:title></metadata>'
            '<manifest><item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
            '</manifest><spine><itemref idref="c1"/></spine></package>',
            "c1.xhtml": f"<html><body><h1>Survey</h1>{chapter}</body></html>",
        }
    )


def _eml(paras: list[str]) -> bytes:
    message = EmailMessage()
    message["Subject"] = "Survey"
    message["From"] = "ann@example.org"
    message["To"] = "bob@example.org"
    message.set_content("\n\n".join(paras))
    return message.as_bytes()


def _rtf(paras: list[str]) -> bytes:
    body = "\\par\\par ".join(paras)
    return ("{\\rtf1\\ansi\\ansicpg1252{\\fonttbl\\f0 Arial;}\\f0 " + body + "\\par}").encode()


WRITERS: dict[str, Callable[[list[str]], bytes]] = {
    ".txt": lambda p: "\n\n".join(p).encode(),
    ".md": lambda p: ("# Survey\n\n" + "\n\n".join(p)).encode(),
    ".html": lambda p: ("<html><body><h1>Survey</h1>" + "".join(f"<p>{x}</p>" for x in p)).encode(),
    ".csv": lambda p: "\n".join(",".join(r) for r in _rows(p)).encode(),
    ".json": lambda p: json.dumps([{"n": i, "text": x} for i, x in enumerate(p)]).encode(),
    ".pdf": _pdf,
    ".docx": _docx,
    ".pptx": _pptx,
    ".xlsx": _xlsx,
    ".xls": _xls,
    ".odt": _odt,
    ".ods": _ods,
    ".odp": _odp,
    ".epub": _epub,
    ".ipynb": lambda p: json.dumps(
        {
            "cells": [{"cell_type": "markdown", "metadata": {}, "source": x} for x in p],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    ).encode(),
    ".rtf": _rtf,
    ".eml": _eml,
}


def write_folder(folder: Path, files: int, seed: int) -> None:
    """Write ``files`` documents, the same prose sequence in every format."""
    rng = random.Random(seed)
    per_format = max(1, files // len(WRITERS))
    texts = [prose(rng) for _ in range(per_format)]
    for suffix, writer in WRITERS.items():
        (folder / suffix[1:]).mkdir()
        for i, paras in enumerate(texts):
            (folder / suffix[1:] / f"doc{i:05d}{suffix}").write_bytes(writer(paras))


def worker(folder: Path) -> dict[str, float]:
    """Read every file of one format's folder in this process; return its figures."""
    t0 = time.perf_counter()
    from ingestor.read.formats import extract, join_parts

    files = sorted(folder.iterdir())
    # the first file pays the reader's imports: timed apart, as a daemon pays them once
    first = files[0]
    extract(first.read_bytes(), first.name, first.suffix)
    imports = time.perf_counter() - t0
    datas = [(f.name, f.suffix, f.read_bytes()) for f in files]
    t1 = time.perf_counter()
    chars = 0
    for name, suffix, data in datas:
        chars += len(join_parts(extract(data, name, suffix).parts))
    seconds = time.perf_counter() - t1
    return {
        "files": len(datas),
        "bytes": sum(len(d) for *_, d in datas),
        "chars": chars,
        "seconds": seconds,
        "imports": imports,
        "rss_mb": _peak_rss_mb(),
    }


def build_vs_txt(folder: Path, tmp: Path) -> None:
    """Time `adrap build` (real model, extractive summaries) of the mixed folder and of a folder
    holding each document's extracted text as a .txt file: the floor is the same text, unread."""
    import os

    from ingestor.read.documents import iter_documents

    plain = tmp / "plain"
    plain.mkdir()
    for path, doc in iter_documents(folder, max_bytes=10**8):
        if not isinstance(doc, Exception):
            (plain / (path.relative_to(folder).as_posix().replace("/", "_") + ".txt")).write_text(
                doc.text
            )
    figures = {}
    for name, root in (("mixed formats", folder), ("same text as .txt", plain)):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
        env |= {"ADRAP_STATE_DIR": str(tmp / f"state-{root.name}"), "HF_HUB_OFFLINE": "1"}
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "ingestor", "build", str(root)],
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"adrap build {root} failed:\n{done.stderr[-2000:]}")
        figures[name] = seconds
        print(f"adrap build, {name}: {seconds:.1f} s wall; {done.stdout.strip().splitlines()[-1]}")
    ratio = figures["mixed formats"] / figures["same text as .txt"]
    print(f"build time, mixed formats / same text as .txt: {ratio:.2f}x")


def _peak_rss_mb() -> float:
    """This process's peak RSS. ``getrusage``'s ru_maxrss survives ``exec`` on Linux, so a worker
    would report its parent's peak (the writers); VmHWM starts afresh with the new image."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=1000, help="documents in the mixed folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--build",
        action="store_true",
        help="also time `adrap build` of the mixed folder against a folder of the same text as .txt",
    )
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return
    with tempfile.TemporaryDirectory(prefix="adrap-bench-formats-") as tmp:
        folder = Path(tmp) / "mixed"
        folder.mkdir()
        write_folder(folder, args.files, args.seed)
        if args.build:
            build_vs_txt(folder, Path(tmp))
        rows = {}
        for suffix in WRITERS:
            out = subprocess.run(
                [sys.executable, __file__, "--worker", str(folder / suffix[1:])],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rows[suffix] = json.loads(out)
    floor = rows[".txt"]["seconds"] / rows[".txt"]["files"]
    print(
        f"{'format':7} {'files':>5} {'MB':>6} {'files/s':>8} {'MB/s':>7} {'chars/file':>10} "
        f"{'x .txt':>7} {'imports s':>9} {'peak RSS MB':>11}"
    )
    total = 0.0
    for suffix, r in rows.items():
        per_file = r["seconds"] / r["files"]
        total += r["seconds"]
        print(
            f"{suffix:7} {r['files']:5d} {r['bytes'] / 2**20:6.2f} {r['files'] / r['seconds']:8.0f} "
            f"{r['bytes'] / 2**20 / r['seconds']:7.2f} {r['chars'] / r['files']:10.0f} "
            f"{per_file / floor:7.1f} {r['imports']:9.2f} {r['rss_mb']:11.0f}"
        )
    n = sum(r["files"] for r in rows.values())
    print(
        f"all {n} files: {total:.2f}s read ({n / total:.0f} files/s); the same number of .txt "
        f"files: {floor * n:.3f}s (floor); ratio {total / (floor * n):.0f}x"
    )


if __name__ == "__main__":
    main()
