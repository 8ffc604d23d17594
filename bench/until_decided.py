"""Runs to a decision with `--until-decided`, over seeds: the bug catalogue's white-box rows
(`victims.dp.bugs`) and their correct twin, each audit in rounds from a first look of 4 runs, doubling
to the budget, against the fixed design that trains the whole budget.

    python bench/until_decided.py [--rows a b g dpsgd1] [--seeds 10] [--n-shadow 32] [--first-look 4]
                                  [--threat white-box|worst-case-8] [--jsonl F]

Each row is `python -m audit.lira` on a catalogue bug (claiming ε = 1, `--epochs 10` as
bench/dp_bugs.py audits it) or the correct dpsgd at ε = 1, `--claimed-epsilon 1`, master seeds
0 .. S-1, each in its own store, under one of bench/dp_bugs.py's designs (`--threat`): white-box,
1,000 gradient canaries under `--threat-model white-box` (the default); or black-box from the
worst case with 8 marked canaries per run (`worst-case-8`).
Prints per row: how many seeds stopped "violated" (for the correct twin: false alarms), the
median and spread of the runs used, and the median wall seconds; `--jsonl` keeps every audit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dp_bugs import THREATS
from victims.dp.bugs import BUGS, path_of

TWINS = {"dpsgd1": "dpsgd"}


def victim_flags(row: str) -> list[str]:
    victim = TWINS.get(row) or path_of(BUGS[row])
    return ["--victim", victim, "--epsilon", "1", "--epochs", "10"]


def one_audit(row: str, seed: int, n_shadow: int, runs_dir: Path, *, threat: str, first_look: int) -> dict:
    command = [
        sys.executable,
        "-m",
        "audit.lira",
        *victim_flags(row),
        *THREATS[threat],
        "--claimed-epsilon",
        "1",
        "--n-shadow",
        str(n_shadow),
        "--until-decided",
        "--first-look",
        str(first_look),
        "--seed",
        str(seed),
        "--runs-dir",
        str(runs_dir),
        "--quiet",
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    # a row's seeds are stores side by side (they share dpsgd's pretrained start); this one is the newest
    summary_path = max(runs_dir.glob("*/audit/summary.json"), key=lambda path: path.stat().st_mtime_ns)
    rounds = json.loads(summary_path.read_text())["sequential"]
    return {
        "row": row,
        "threat": threat,
        "seed": seed,
        "stopped": rounds["stopped"],
        "stopped_by": rounds.get("stopped_by"),
        "runs_used": rounds["runs_used"],
        "wall_s": wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", nargs="+", default=["a", "b", "g", "dpsgd1"])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--n-shadow", type=int, default=32)
    p.add_argument("--first-look", type=int, default=4)
    p.add_argument("--threat", choices=("white-box", "worst-case-8"), default="white-box")
    p.add_argument("--jsonl", type=Path, default=None)
    args = p.parse_args()
    for row in args.rows:
        found = []
        with tempfile.TemporaryDirectory() as runs_dir:
            for seed in range(args.seeds):
                found.append(
                    one_audit(row, seed, args.n_shadow, Path(runs_dir), threat=args.threat, first_look=args.first_look)
                )
                if args.jsonl:
                    with args.jsonl.open("a") as f:
                        f.write(json.dumps(found[-1]) + "\n")
        runs = [f["runs_used"] for f in found]
        violated = sum(f["stopped"] == "violated" for f in found)
        print(
            f"{row:7s} violated in {violated}/{len(found)} seeds; runs used: median {statistics.median(runs):g} "
            f"(min {min(runs)}, max {max(runs)}) of {args.n_shadow}; median wall "
            f"{statistics.median(f['wall_s'] for f in found):.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
