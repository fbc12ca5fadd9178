"""kill -9 during updates: the rounds bench/crash.py runs at length (its docstring tells what
a round does and checks) and tests/integration/test_crash_rounds.py runs short.

:class:`CrashBench` runs the rounds and counts what it found in :class:`Totals`; :func:`summary`
words them; :func:`inspect` reads a state and its store after a kill, read-only.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ingestor.cli.query import NO_MATCH_EXIT
from ingestor.tree.invariants import violations
from ingestor.tree.persist import load_state, pending_intent
from models_store import ModelStore
from retriever.edge_store import EdgeNodeStore
from testkit.soak_ops import Corpus, Soak

TREE = "default"
OPS = ("add", "edit", "remove", "rename")
WEIGHTS = (35, 35, 15, 15)
#: The debug line that starts each phase of an update (ingestor/pipeline/apply.py, context.py), in order.
MARKS = (
    ("locked ", "start"),
    ("update: embedding", "embed"),
    ("update: writing", "show"),
    ("update: placing", "adrap"),
    ("refresh: regenerating", "refresh"),
    ("update: intent recorded", "upsert"),
    ("update: upserted", "commit"),
    ("update: committed", "delete"),
    ("update: deleted", "intent"),
    ("update: done", "exit"),
)
PHASES = tuple(p for _, p in MARKS)
TARGETS = tuple(p for p in PHASES[1:-1] if p != "refresh")  # an update's aimed-at phases
REFRESH_TARGETS = PHASES[PHASES.index("refresh") : -1]  # `adrap refresh`'s
#: Rounds killed at a uniform time after the lock (the rest aim at a phase).
UNIFORM_SHARE = 0.3


def phase_of(msg: str) -> str | None:
    """Return the phase a log message starts, or None for any other line."""
    return next((p for mark, p in MARKS if msg.startswith(mark)), None)


class Writer:
    """One CLI writer run as a child process, its JSON log lines read as they come."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.lines: list[tuple[float, str]] = []  # (monotonic time received, message)
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ingestor", "-v", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            try:
                msg = str(json.loads(raw)["msg"])
            except (ValueError, KeyError, TypeError):
                msg = raw.rstrip()
            with self.cond:
                self.lines.append((time.monotonic(), msg))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def phases(self) -> list[tuple[float, str]]:
        """Return (time, phase) of each phase line seen so far."""
        with self.cond:
            return [(t, p) for t, m in self.lines if (p := phase_of(m)) is not None]

    def wait_phase(self, at_least: str, timeout: float = 600) -> float | None:
        """Wait until a phase at or past ``at_least`` starts; return when, or None if it exited."""
        want = PHASES.index(at_least)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = [t for t, p in self.phases() if PHASES.index(p) >= want]
                if got:
                    return got[0]
                if not self.reader.is_alive() or time.monotonic() > deadline:
                    return None
                self.cond.wait(0.05)

    def wait_line(self, prefix: str, timeout: float, poll: float = 0.02) -> bool:
        """Wait until a log line starts with ``prefix``; return whether one did before the
        writer exited or ``timeout`` seconds went by."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while time.monotonic() < deadline and self.proc.poll() is None:
                if any(m.startswith(prefix) for _, m in self.lines):
                    return True
                self.cond.wait(poll)
        return False

    def kill(self) -> bool:
        """SIGKILL the writer; return whether it was still running."""
        alive = self.proc.poll() is None
        if alive:
            self.proc.send_signal(signal.SIGKILL)
        return alive

    def finish(self, timeout: float = 900) -> tuple[int, str]:
        """Wait for the writer to end; return its exit code and stdout.

        Not ``communicate()``: it would read stderr too, racing the reader thread for log lines.
        """
        code = self.proc.wait(timeout)
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        out = self.proc.stdout.read()
        self.proc.stdout.close()
        self.reader.join(30)
        self.proc.stderr.close()
        return code, out

    def last(self) -> str:
        """Return the phase of the last phase line logged and the last line itself."""
        seen = self.phases()
        last = self.lines[-1][1][:70] if self.lines else "(nothing logged)"
        return f"{seen[-1][1] if seen else 'startup'}|{last}"


@dataclass
class Inspection:
    """The store against the committed state, read in this process."""

    orphans: int = 0
    missing: int = 0
    mismatched: int = 0
    invariants: int = 0
    sources_differ: int = 0
    intent: str = "none"  # none / open / committed
    generation: int = 0
    stale: frozenset[str] = frozenset()  # the committed stale summaries


def inspect(state_dir: Path, root: Path | None) -> Inspection:
    """Compare store and state read-only; with ``root``, also invariants and sources == files."""
    state = load_state(ModelStore(state_dir / "models"), TREE, readonly=True)
    assert state is not None, f"no committed state in {state_dir}"
    out = Inspection(generation=state.generation, stale=frozenset(state.stale))
    intent = pending_intent(state)
    if intent is not None:
        out.intent = "committed" if intent.committed else "open"
    with EdgeNodeStore(state_dir / "qdrant") as store:
        stored, ids = set(store.iter_ids(TREE)), set(state.nodes)
        out.orphans, out.missing = len(stored - ids), len(ids - stored)
        common = sorted(ids & stored)
        got = {p.node_id: p.model_dump() for p in store.retrieve(common)}
        want = {p.node_id: p.model_dump() for p in state.payloads(common)}
        out.mismatched = sum(got.get(i) != want[i] for i in common)
        if root is not None:
            state.vectors.fetch = store.retrieve_vectors
            out.invariants = len(violations(state))
    if root is not None:
        files = {f.relative_to(root).as_posix() for f in root.rglob("*.txt") if f.stat().st_size}
        out.sources_differ = len(set(state.sources) ^ files)
    return out


@dataclass
class Totals:
    rounds: int = 0
    kills: Counter[str] = field(default_factory=Counter)  # phase the kill landed in
    not_killed: int = 0
    orphans: int = 0
    missing: int = 0
    mismatched: int = 0
    invariants: int = 0
    sources_differ: int = 0
    missing_after_kill: int = 0  # a reader could not find a committed node
    reader_failures: int = 0
    rerun_failures: int = 0
    recoveries_expected: int = 0
    recoveries_run: int = 0
    intents_left: int = 0  # an intent still pending after the rerun
    refreshes: int = 0  # deferred rounds: `adrap refresh` runs killed
    refresh_kills: Counter[str] = field(default_factory=Counter)
    refreshed_stale: int = 0  # stale summaries those refreshes had to regenerate
    stale_lost: int = 0  # a killed refresh left some of its stale marks, not all or none
    stale_left: int = 0  # stale summaries after the refresh's rerun
    queries: int = 0
    wall: float = 0.0

    def failures(self) -> int:
        """Everything that must stay 0."""
        return (
            self.orphans
            + self.missing
            + self.mismatched
            + self.invariants
            + self.sources_differ
            + self.missing_after_kill
            + self.reader_failures
            + self.rerun_failures
            + self.recoveries_expected
            - self.recoveries_run
            + self.intents_left
            + self.stale_lost
            + self.stale_left
        )


class CrashBench:
    """The folder, the state dir and the rounds (see the module docstring)."""

    def __init__(
        self,
        work: Path,
        seed: int,
        docs: int,
        out: Callable[[str], None] = print,
        refresh_share: float = 0.3,
    ):
        self.rng = random.Random(seed)
        self.refresh_share = refresh_share
        self.root, self.state_dir = work / "folder", work / "state"
        self.soak = Soak(None, self.root, Corpus(self.rng), self.rng)
        self.soak.seed_folder(docs)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")} | {
            "ADRAP_STATE_DIR": str(self.state_dir),
            "ADRAP_ADRAP__DRIFT_THRESHOLD": "1e12",
            "ADRAP_SUMMARY__BACKEND": "extractive",
            "HF_HUB_OFFLINE": "1",
        }
        self.out = out
        self.lengths: dict[str, list[float]] = {p: [] for p in PHASES}
        self.whole: list[float] = []
        self.refresh_lengths: dict[str, list[float]] = {p: [] for p in PHASES}
        self.refresh_whole: list[float] = []
        self.totals = Totals()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ingestor", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    def build(self) -> str:
        done = self.cli("build", str(self.root))
        assert done.returncode == 0, f"adrap build failed: {done.stderr[-2000:]}"
        return done.stdout.strip()

    def operations(self) -> tuple[list[str], list[str]]:
        """Do 1-5 random operations; return the ops and the writer's arguments."""
        ops = self.rng.choices(OPS, WEIGHTS, k=self.rng.randint(1, 5))
        touched: list[Path] = []
        for op in ops:
            touched += self.soak.operation(op)
        paths = [str(p) for p in dict.fromkeys(touched)]
        command = "remove" if all(op == "remove" for op in ops) else "add"
        return ops, [command, *paths]

    def calibrate(self) -> None:
        """Unkilled rounds: how long each phase of an update (and of a refresh) takes here."""
        _, args = self.operations()
        self._time(args, self.lengths, self.whole)
        if self.refresh_share > 0:
            _, args = self.operations()
            self._time([args[0], "--defer-summaries", *args[1:]], {}, [])
            self._time(["refresh"], self.refresh_lengths, self.refresh_whole)

    def _time(self, args: list[str], lengths: dict[str, list[float]], whole: list[float]) -> None:
        w = Writer(args, self.env)
        code, _ = w.finish()
        assert code == 0, f"calibration `adrap {' '.join(args)}` failed: {w.lines[-5:]}"
        seen = w.phases()
        for (t0, p), (t1, _) in pairwise(seen):
            lengths.setdefault(p, []).append(t1 - t0)
        if seen and seen[-1][1] == "exit":  # a no-op update logs no phase after its lock
            whole.append(seen[-1][0] - seen[0][0])  # locked -> done

    def typical(self, phase: str, lengths: dict[str, list[float]] | None = None) -> float:
        got = (self.lengths if lengths is None else lengths).get(phase)
        return statistics.median(got) if got else 0.0

    def round(self, n: int, query: bool) -> None:
        """One round: random operations, their update killed and rerun; in a deferred round,
        then `adrap refresh` killed and rerun."""
        t = self.totals
        ops, args = self.operations()
        deferred = self.rng.random() < self.refresh_share
        if deferred:
            args = [args[0], "--defer-summaries", *args[1:]]
        line = self.killed(args, TARGETS, self.lengths, self.whole, query, t.kills)
        self.out(f"{n:>3} {args[0]} {','.join(ops):<27}{' deferred' if deferred else ''} {line}")
        if deferred:
            before = inspect(self.state_dir, None)
            t.refreshes += 1
            t.refreshed_stale += len(before.stale)
            line = self.killed(
                ["refresh"],
                REFRESH_TARGETS,
                self.refresh_lengths,
                self.refresh_whole,
                False,
                t.refresh_kills,
                before,
            )
            self.out(f"{n:>3} refresh of {len(before.stale)} stale summaries {line}")
        t.rounds += 1

    def killed(
        self,
        args: list[str],
        targets: tuple[str, ...],
        lengths: dict[str, list[float]],
        whole: list[float],
        query: bool,
        kills: Counter[str],
        before: Inspection | None = None,
    ) -> str:
        """Run ``adrap ARGS``, SIGKILL it at a random point, read, rerun, check; return the line.

        With ``before`` (a refresh), the committed stale marks right after the kill must be all
        of those before it (not committed) or none (committed), and none may be left at the end.
        """
        t = self.totals
        w = Writer(args, self.env)
        if self.rng.random() < UNIFORM_SHARE:
            target, start = "uniform", w.wait_phase("start")
            delay = self.rng.random() * statistics.median(whole or [0.0])
        else:
            target = self.rng.choice(targets)
            start, delay = w.wait_phase(target), self.rng.random() * self.typical(target, lengths)
        if start is not None:
            time.sleep(max(0.0, start + delay - time.monotonic()))
        killed = w.kill()
        code, _ = w.finish()
        landed = w.last() if killed else "not killed"
        if killed:
            kills[landed.split("|")[0]] += 1
        else:
            t.not_killed += 1
            t.rerun_failures += code != 0
        after = inspect(self.state_dir, None)
        t.missing_after_kill += after.missing
        marks = ""
        if before is not None:
            kept = after.stale == before.stale or not after.stale
            t.stale_lost += not kept
            marks = f", stale {len(after.stale)}{'' if kept else ' (MARKS LOST)'}"
        status = self.cli("status", "--json")
        reader = "status " + (
            f"gen {json.loads(status.stdout)['generation']}" if status.returncode == 0 else "FAILED"
        )
        t.reader_failures += status.returncode != 0
        if query:
            files = sorted(self.root.rglob("*.txt"))
            words = files[0].read_text().split()[:6] if files else ["river"]
            q = self.cli("query", " ".join(words), "--json")
            t.queries += 1
            # 3: nothing scores above ADRAP_QUERY__MIN_SCORE (six words of a file are not always
            # a question the tree answers); the closest passages are still returned
            ok = q.returncode in (0, NO_MATCH_EXIT) and json.loads(q.stdout)["hits"]
            why = "" if ok else f" (rc {q.returncode}: {(q.stderr or q.stdout)[-300:]!r})"
            reader += f", query {len(json.loads(q.stdout)['hits']) if ok else 'FAILED'} hits{why}"
            t.reader_failures += not ok
        rerun = Writer(args, self.env)
        rcode, _ = rerun.finish()
        recovered = any(m.startswith("recovered tree") for _, m in rerun.lines)
        already = args[0] == "remove" and any("is not in tree" in m for _, m in rerun.lines)
        t.rerun_failures += rcode != 0 and not already
        t.recoveries_expected += after.intent != "none"
        t.recoveries_run += recovered and after.intent != "none"
        end = inspect(self.state_dir, self.root)
        t.intents_left += end.intent != "none"
        for name in ("orphans", "missing", "mismatched", "invariants", "sources_differ"):
            setattr(t, name, getattr(t, name) + getattr(end, name))
        if before is not None:
            t.stale_left += len(end.stale)
            marks += f" -> {len(end.stale)} after the rerun"
        return (
            f"target {target:<7} kill@{landed[:60]!r} | after kill: intent {after.intent}, "
            f"orphans {after.orphans}, missing {after.missing}, payloads differ "
            f"{after.mismatched}{marks}; {reader} | rerun rc {rcode}"
            f"{' recovered' if recovered else ''}{' (already removed)' if already else ''} | "
            f"orphans {end.orphans} missing {end.missing} payloads {end.mismatched} "
            f"invariants {end.invariants} sources {end.sources_differ} intent {end.intent}"
        )

    def run(self, rounds: int, calibration: int = 2, query_every: int = 1) -> Totals:
        t0 = time.perf_counter()
        self.out(self.build())
        for _ in range(calibration):
            self.calibrate()
        self.out(
            f"typical seconds: update {statistics.median(self.whole or [0.0]):.2f} (from its lock), "
            + ", ".join(f"{p} {self.typical(p):.3f}" for p in PHASES if self.lengths[p])
        )
        if self.refresh_whole:
            self.out(
                f"typical seconds: refresh {statistics.median(self.refresh_whole):.2f}, "
                + ", ".join(
                    f"{p} {self.typical(p, self.refresh_lengths):.3f}"
                    for p in PHASES
                    if self.refresh_lengths.get(p)
                )
            )
        try:
            for n in range(1, rounds + 1):
                self.round(n, query=query_every > 0 and n % query_every == 0)
        except KeyboardInterrupt:  # Ctrl-C: the summary of the rounds done
            self.out(f"interrupted in round {self.totals.rounds + 1}")
        self.totals.wall = time.perf_counter() - t0
        return self.totals


def summary(t: Totals) -> str:
    kills = ", ".join(f"{p} {t.kills[p]}" for p in ("startup", *PHASES) if t.kills[p])
    refresh_kills = ", ".join(
        f"{p} {t.refresh_kills[p]}" for p in ("startup", *PHASES) if t.refresh_kills[p]
    )
    return (
        f"rounds {t.rounds}: killed {sum(t.kills.values())} ({kills}), finished before the kill "
        f"{t.not_killed}\n"
        f"after the reruns: orphans {t.orphans}, missing {t.missing}, payload mismatches "
        f"{t.mismatched}, invariant violations {t.invariants}, sources != files "
        f"{t.sources_differ} (target 0 each)\n"
        f"right after the kills: committed nodes missing from the store {t.missing_after_kill}, "
        f"reader failures {t.reader_failures} ({t.rounds} status, {t.queries} query); reruns "
        f"failed {t.rerun_failures}; recoveries run {t.recoveries_run} of "
        f"{t.recoveries_expected} expected, intents left after the reruns {t.intents_left}\n"
        f"deferred rounds {t.refreshes}: refreshes killed {sum(t.refresh_kills.values())} "
        f"({refresh_kills}) over {t.refreshed_stale} stale summaries; marks lost by a kill "
        f"{t.stale_lost}, stale left after the reruns {t.stale_left} (target 0 each)\n"
        f"wall {t.wall:.0f}s ({t.wall / max(1, t.rounds):.1f}s a round)"
    )
