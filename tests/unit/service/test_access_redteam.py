"""A soak of random permission changes, checked against the kernel after every step (issue 53).

Each step changes a share the way its users do (chmod and chown of files and folders, an ACL set
and cleared, a file moved between folders, an edit, a file deleted) and brings the tree up to date,
its summaries regenerated at once or deferred (stale until a refresh, as the daemon's window
does); then, for each user made for the test, the **kernel** says which files they may read (a
forked process that switched to the user asks ``os.access``), and the tree must agree: every node
the user's filter lets through lies only over files they may read (no leak, through leaves or
summaries), its **text** quotes only files they may read or deleted files they could read when
they were deleted (each file carries a word of its own, which summaries quote), and every leaf of
a file they may read is let through (nothing withheld). The tree's invariants hold too.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ingestor.answer.service import QueryService
from ingestor.read.access_classes import ANONYMOUS, Identity
from ingestor.tree.invariants import violations
from retriever import SearchFilter
from testkit.fakes import QuotingSummarizer
from tests.unit.service.test_access_doors import (  # noqa: F401 (users: a fixture)
    GROUP,
    _user,
    as_user,
    users,
)
from tests.unit.service.test_watcher import doc_text, make_pipeline

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd to make the users the kernel is asked about",
)
NOBODY = 65534  # in no group of the share: the kernel's answer for an anonymous caller


def _kernel_readable(uid: int, root: Path, sources: list[str]) -> set[str]:
    """Return the sources ``uid`` may read, as the kernel says (a fork that became ``uid``)."""
    return set(as_user(uid, lambda: [s for s in sources if os.access(root / s, os.R_OK)]))


def _write(rng: random.Random, path: Path) -> None:
    """A document that starts with a word of its own (summaries quote first words)."""
    path.write_text(f"{_mark()} {doc_text(rng, rng.randint(3, 6))}")


_marks = iter(range(10**6))


def _mark() -> str:
    return f"mk{next(_marks):05d}q"


MARK = re.compile(r"mk\d{5}q")


def _step(rng: random.Random, root: Path, uids: list[int]) -> str:
    files = sorted(p for p in root.rglob("*.txt"))
    dirs = sorted(p for p in root.iterdir() if p.is_dir())
    ops = ["chmod-file", "chmod-dir", "chown", "acl", "acl-clear", "move", "edit", "delete"]
    op = rng.choice(ops if len(files) > 8 else ops[:-1])
    f, d = rng.choice(files), rng.choice(dirs)
    if op == "chmod-file":
        os.chmod(f, rng.choice([0o600, 0o640, 0o644, 0o604]))
    elif op == "chmod-dir":
        os.chmod(d, rng.choice([0o700, 0o750, 0o755, 0o711, 0o701]))
    elif op == "chown":
        target = rng.choice([f, d])
        os.chown(target, rng.choice(uids), -1)
        shutil.chown(target, group=rng.choice([GROUP, "root"]))
    elif op == "acl" and shutil.which("setfacl"):
        bob = _user("bob")
        subprocess.run(["setfacl", "-m", f"u:{bob}:rx", str(d)], check=True)
        subprocess.run(["setfacl", "-m", f"u:{bob}:r", str(f)], check=True)
    elif op == "acl-clear" and shutil.which("setfacl"):
        subprocess.run(["setfacl", "-b", str(f), str(d)], check=True)
    elif op == "move":
        other = rng.choice(dirs)
        f.rename(other / f"m{rng.randrange(10**6)}.txt")  # public to private, and back
    elif op == "delete":
        f.unlink()
    else:
        _write(rng, f)
    return f"{op} {f.relative_to(root)} {d.relative_to(root)}"


# 40 steps in the fast suite (its share of the suite's time); the long run under slow
@pytest.mark.parametrize("steps", [40, pytest.param(200, marks=pytest.mark.slow)])
def test_random_permission_changes_never_leak_and_never_withhold(
    users: dict[str, int],  # noqa: F811
    steps: int,
) -> None:
    rng = random.Random(53)
    # The kernel is asked through the path above the root too: a place every user may pass
    # (pytest's tmp dirs are 0700); adrap itself checks from the root down.
    base = Path(tempfile.mkdtemp(prefix="adrap-redteam-"))
    os.chmod(base, 0o755)
    root = base / "share"
    for j, name in enumerate(["pub", "hr", "mgmt"]):
        for i in range(7):
            (root / name).mkdir(parents=True, exist_ok=True)
            _write(rng, root / name / f"d{j}{i}.txt")
    defer = {"now": False}
    p = make_pipeline(base, QuotingSummarizer(words=2), defer_summaries=lambda: defer["now"])
    p.build(root)
    service = QueryService(
        p.context.store, p.context.embedder, "t", classes=p.context.access.registry
    )
    uids = list(users.values())
    who = {uid: Identity.of_uid(uid) for uid in uids} | {NOBODY: ANONYMOUS}
    marks = {
        MARK.findall(f.read_text())[0]: f.relative_to(root).as_posix() for f in root.rglob("*.txt")
    }
    could: dict[int, set[str]] = {uid: set() for uid in who}  # words of gone text they could read
    try:
        for step in range(steps):
            before = {uid: _kernel_readable(uid, root, sorted(set(marks.values()))) for uid in who}
            was = dict(marks)
            did = _step(rng, root, uids)
            defer["now"] = rng.random() < 0.5
            if not defer["now"] and rng.random() < 0.5:
                p.refresh()  # a refresh window: the stale summaries regenerated
            p.reconcile(root)
            marks = {  # the files' words now; a removed or rewritten one's stays its readers'
                MARK.findall(f.read_text())[0]: f.relative_to(root).as_posix()
                for f in root.rglob("*.txt")
            }
            for uid in who:
                could[uid] |= {m for m, f in was.items() if m not in marks and f in before[uid]}
            state = p.require_state()
            assert violations(state) == [], f"step {step} ({did})"
            sources = sorted(state.sources.keys())
            for uid, identity in who.items():
                allowed = _kernel_readable(uid, root, sources)
                flt = service.reader_filter(SearchFilter(tree="t"), identity)
                seen, _ = p.context.store.scroll(flt, 100_000)
                leaked = {s for n in seen for s in n.sources} - allowed
                assert not leaked, f"step {step} ({did}): {identity.name} got {sorted(leaked)}"
                quoted = {m for n in seen for m in MARK.findall(n.text)}
                mine = {m for m, f in marks.items() if f in allowed} | could[uid]
                told = sorted(marks.get(m, m) for m in quoted - mine)
                assert not told, f"step {step} ({did}): {identity.name} read the text of {told}"
                shown = {n.source for n in seen if n.layer == 0}
                assert shown == allowed, f"step {step} ({did}): {identity.name} withheld"
    finally:
        p.context.store.close()
        shutil.rmtree(base, ignore_errors=True)
