"""kill -9 during updates (issue 9): random file operations, `adrap add` killed mid-work, rerun.

A folder of about 30 documents (SQuAD paragraphs or generated text, testkit/soak_ops.Corpus) is
built once through the real CLI (`python -m ingestor build`: the packaged embedding model,
extractive summaries, drift rebuilds off so adRAP carries the tree). Each round:

1. 1-5 random operations on the folder (add / edit / remove / rename a document);
2. `adrap -v add PATHS` (or `adrap -v remove PATHS` when every operation removed a file) is
   started, and killed with SIGKILL at a random point of its work: never during start-up (the
   clock starts at its "locked ... for adrap add" log line, after the model is loaded). 30 % of
   the rounds kill at a uniform time over the update's typical length; the other half pick a phase
   (embed, leaves written first, adRAP, upsert, commit, delete, intent drop), wait for the debug
   line that starts it, then sleep a random fraction of that phase's typical length, so the
   short store steps get kills too. Typical lengths come from unkilled calibration rounds. Where
   each kill landed is the phase of the last line the writer logged;
3. right after the kill, read-only: the store against the committed state (points missing are
   what a reader could not find), `adrap status --json` and `adrap query` (every
   ``--query-every`` rounds) must answer;
4. the same command is run again to completion: it must recover the interrupted update itself
   ("recovered tree ..." in its log whenever the kill left an intent);
5. checked in this process, read-only: store ids == state ids (orphans and missing counted
   apart), every stored payload == the state's payload for that node (whole ``model_dump``), the
   tree invariants (``ingestor.tree.invariants.violations``), the state's sources == the files.

    python bench/crash.py [--rounds 100] [--seed 0] [--docs 30] [--query-every 1]
                          [--refresh-share 0.3]

With ``--refresh-share`` (default 0.3), that share of the rounds defers its summaries (issue 34:
`adrap add --defer-summaries`, killed and rerun as above, leaves the summaries it touched stale),
then runs `adrap refresh` killed the same way (uniformly, or aimed at regenerating, upsert, commit,
delete, intent drop) and rerun. Right after that kill the committed stale marks must be either all
there (the refresh did not commit) or all gone (it did): none lost, none half-paid. After the rerun
none may be left.

The rounds are testkit/crash.py's; the short version runs in
tests/integration/test_crash_rounds.py (marked slow).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.crash import CrashBench, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs", type=int, default=30, help="documents in the folder at the start")
    ap.add_argument("--calibration", type=int, default=2, help="unkilled rounds to time phases")
    ap.add_argument("--query-every", type=int, default=1, help="`adrap query` every N rounds")
    ap.add_argument(
        "--refresh-share",
        type=float,
        default=0.3,
        help="rounds that defer their summaries, then kill and rerun `adrap refresh`",
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        bench = CrashBench(
            Path(tmp), args.seed, args.docs, lambda s: print(s, flush=True), args.refresh_share
        )
        totals = bench.run(args.rounds, args.calibration, args.query_every)
    print(summary(totals))
    return 1 if totals.failures() else 0


if __name__ == "__main__":
    raise SystemExit(main())
