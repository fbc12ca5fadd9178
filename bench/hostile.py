"""A share of hostile and odd files against a running daemon (issue 57): each case contained?

    python bench/hostile.py [--timeout 120] [--cases ods-repeat,parens,...]

Starts `adrap watch` (the packaged model, default settings but the owner's token) over a small
share, then for each case drops the hostile thing in, then an ordinary file with a unique word,
and prints: seconds until the ordinary file is searchable (its leaf is a `/query` hit), the
daemon's peak RSS during the case (and its reader processes' peak: they are children), the
slowest `/healthz` answer during the case, and the outcome `/status` gives for the hostile file
(skipped / stale with the reason, or indexed). Ends with SIGTERM -> exit seconds.

Cases: ``ods-repeat`` (a ~700-byte .ods, one empty cell repeated 10^9 times), ``xlsx-dimension``
(an .xlsx declaring A1:XFD1048576), ``pptx-member`` (a .pptx whose slide declares 3 GiB),
``parens`` (6 KB of ``)``), ``json-brackets`` (200 KB of ``[[[...]]]``), ``bad-name`` (a name
that is not UTF-8), ``idle-connections`` (31 idle TCP connections held through the case),
``parent-link`` (a symlink to the share's root inside it), ``fifo``, ``link-out`` (a symlink to
a file outside the share), ``oversize`` (a sparse file past the size limit), ``deep-chain`` (a
``mkdir -p`` 2,000 folders deep), ``copies`` (50 hard links of one 40 KB text), ``control-name``
(a newline and an escape sequence in a file's name). Targets: peak RSS
<= without + 300 MB, /healthz <= 1 s, the ordinary file within ~2 s, SIGTERM -> exit <= 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from testkit.bombs import GIB, cell, declare, make_xlsx, ods, rewrite_member, row  # noqa: E402
from testkit.office import make_pptx  # noqa: E402

TOKEN = "bench-owner"


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().split(") ")[1].split()[1]) == pid:
                    out.append(int(p.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


class Watch:
    def __init__(self, share: Path, state: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
        env |= {"ADRAP_STATE_DIR": str(state), "ADRAP_WATCH__HTTP_TOKEN": TOKEN}
        env |= {"HF_HUB_OFFLINE": "1"}
        self.log = state.parent / "watch.log"
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ingestor", "watch", str(share), "--http-port", "0"],
                stdout=subprocess.DEVNULL, stderr=err, env=env,
            )  # fmt: skip
        self.state = state
        self.base = ""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not self.ready():
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.3)

    def ready(self) -> bool:
        try:
            info = json.loads((self.state / "adrap.lock").read_text() or "{}")
        except (OSError, ValueError):
            return False
        if "http" not in info:
            return False
        self.base = f"http://{info['http']}"
        return self.get("/readyz")[0] == 200

    def get(self, route: str, timeout: float = 30) -> tuple[int, bytes]:
        req = urllib.request.Request(
            self.base + route, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            return 0, b""


class Sampler(threading.Thread):
    """Samples the daemon's and its readers' RSS and times /healthz, every 0.1 s."""

    def __init__(self, w: Watch) -> None:
        super().__init__(daemon=True)
        self.w = w
        self.stop = threading.Event()
        self.reset()

    def reset(self) -> None:
        self.peak = self.child_peak = 0
        self.slowest = 0.0

    def run(self) -> None:
        while not self.stop.wait(0.1):
            pid = self.w.proc.pid
            self.peak = max(self.peak, rss_kb(pid))
            self.child_peak = max([self.child_peak, *(rss_kb(c) for c in children(pid))])
            t0 = time.perf_counter()
            self.w.get("/healthz", timeout=10)
            self.slowest = max(self.slowest, time.perf_counter() - t0)


def outcome(w: Watch, name: str) -> str:
    code, body = w.get("/status?limit=1000")
    if code != 200:
        return f"/status {code}"
    status = json.loads(body)
    for part in ("unread", "quarantined"):
        text = json.dumps(status.get(part, {}), ensure_ascii=False)
        at = text.find(name)
        if at >= 0:
            return f"{part}: {text[at : at + 160]}"
    return "not listed"


def cases(share: Path, outside: Path) -> dict[str, Callable[[], str]]:
    def write(name: str, data: bytes) -> Callable[[], str]:
        def make() -> str:
            (share / name).write_bytes(data)
            return name

        return make

    def bad_name() -> str:
        raw = os.fsencode(share) + b"/caf\xe9-\xff.txt"
        with open(raw, "wb") as f:
            f.write(b"Latin-1 named notes about the canal and the lock keeper.\n")
        return "caf"

    def parent_link() -> str:
        (share / "loop").symlink_to(share, target_is_directory=True)
        return "loop"

    def fifo() -> str:
        os.mkfifo(share / "pipe.txt")
        return "pipe.txt"

    def link_out() -> str:
        (outside / "secret.conf").write_text("password = outside of the share\n")
        (share / "app.conf").symlink_to(outside / "secret.conf")
        return "app.conf"

    def deep_chain() -> str:  # `mkdir -p` 2,000 deep, a file at the bottom (through descriptors)
        fd = os.open(share, os.O_RDONLY)
        for _ in range(2000):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = sub
        out = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"The bottom of a very deep chain of folders.\n")
        os.close(out)
        os.close(fd)
        return "d/d/d"

    def copies() -> str:  # 50 hard links of one 40 KB text: one embedding of its chunks
        text = " ".join(
            f"The ferry timetable row {i} lists the crossing at noon." for i in range(700)
        )
        (share / "timetable.txt").write_text(text)
        for i in range(50):
            os.link(share / "timetable.txt", share / f"timetable ({i}).txt")
        return "timetable (49).txt"

    def control_name() -> str:  # a newline and an escape sequence in a name
        (share / "notes\n2026-01-01 forged line\x1b[2J.txt").write_text("Minutes of the board.\n")
        return "notes\\n2026"

    def oversize() -> str:
        with (share / "huge.txt").open("wb") as f:
            f.truncate(60 * 10**6)
        return "huge.txt"

    xlsx = rewrite_member(
        make_xlsx({1: "heron"}),
        "xl/worksheets/sheet1.xml",
        b'<dimension ref="A1:A1"/>',
        b'<dimension ref="A1:XFD1048576"/>',
    )
    return {
        "ods-repeat": write("sheet.ods", ods(row(cell("", 10**9)))),
        "xlsx-dimension": write("wide.xlsx", xlsx),
        "pptx-member": write("talk.pptx", declare(make_pptx(), "ppt/slides/slide1.xml", size=3 * GIB)),
        "parens": write("parens.txt", b"Notes " + b")" * 6000 + b"\n"),
        "json-brackets": write("deep.json", b"[" * 100_000 + b"]" * 100_000),
        "bad-name": bad_name,
        "parent-link": parent_link,
        "fifo": fifo,
        "link-out": link_out,
        "oversize": oversize,
        "deep-chain": deep_chain,
        "copies": copies,
        "control-name": control_name,
        "idle-connections": lambda: "",
    }  # fmt: skip


def sample_share(prefix: str, beside: str) -> tuple[Path, Path, Path]:
    """A temporary folder with ``share/`` (a copy of examples/sample) and an empty ``beside``."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    (base / beside).mkdir()
    shutil.copytree(REPO / "examples" / "sample", base / "share")
    return base, base / "share", base / beside


def searchable(w: Watch, word: str, name: str, timeout: float) -> float | None:
    t0 = time.monotonic()
    q = urllib.parse.urlencode({"q": word, "max_layer": 0, "max_tokens": 500, "hybrid": "true"})
    while time.monotonic() - t0 < timeout:
        code, body = w.get(f"/query?{q}")
        if code == 200 and any(h.get("source") == name for h in json.loads(body)["hits"][:3]):
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--cases", default="")
    a = ap.parse_args(argv)
    base, share, outside = sample_share("adrap-hostile-", "outside")
    w = Watch(share, base / "state")
    sampler = Sampler(w)
    sampler.start()
    time.sleep(3)
    print(f"idle daemon: RSS {rss_kb(w.proc.pid) / 1024:.0f} MiB")
    chosen = set(filter(None, a.cases.split(",")))
    print(f"{'case':<17} {'ordinary file':>13} {'daemon peak':>11} {'readers peak':>12} "
          f"{'/healthz max':>12}  outcome")  # fmt: skip
    held: list[socket.socket] = []
    for i, (name, make) in enumerate(cases(share, outside).items()):
        if chosen and name not in chosen:
            continue
        sampler.reset()
        if name == "idle-connections":
            host, port = w.base.removeprefix("http://").rsplit(":", 1)
            held = [socket.create_connection((host, int(port))) for _ in range(31)]
        t0 = time.monotonic()
        hostile = make()
        word = f"zq{i}ordinaryfile{i}"
        ordinary = f"ordinary-{i}.txt"
        (share / ordinary).write_text(f"The {word} note is about the weekly garden meeting.\n")
        found = searchable(w, word, ordinary, a.timeout)
        what = outcome(w, hostile) if hostile else "-"
        for s in held:
            s.close()
        held = []
        delay = f"{found:.1f} s" if found is not None else f">{a.timeout:.0f} s"
        print(
            f"{name:<17} {delay:>13} {sampler.peak / 1024:>8.0f} MiB {sampler.child_peak / 1024:>9.0f}"
            f" MiB {sampler.slowest:>10.2f} s  {what[:140]}"
        )
        del t0
    sampler.stop.set()
    t0 = time.monotonic()
    w.proc.send_signal(signal.SIGTERM)
    code = w.proc.wait(120)
    print(f"SIGTERM -> exit {code} in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
