"""Runs to a decision with `--until-decided`, over seeds: the bug catalogue's white-box rows
(`victims.bugs`) and their correct twin, each audit in rounds from a first look of 4 runs, doubling
to the budget, against the fixed design that trains the whole budget.

    python bench/until_decided.py [--rows a b g dpsgd1] [--seeds 10] [--n-shadow 32] [--first-look 4]
                                  [--threat white-box|worst-case|worst-case-8|-16|-32] [--jsonl F]
                                  [--runs-dir DIR] [--fixed N [N ...]]

Each row is `python -m audit.lira` on a catalogue bug (claiming ε = 1, `--epochs 10` as
bench/dp_bugs.py audits it) or the correct dpsgd at ε = 1, `--claimed-epsilon 1`, master seeds
0 .. S-1, each in its own store, under one of bench/dp_bugs.py's designs (`--threat`): white-box,
1,000 gradient canaries under `--threat-model white-box` (the default); or black-box from the
worst case with 8, 16 or 32 marked canaries per run (`worst-case-8`, `-16`, `-32`).
Prints per row: how many seeds stopped "violated" (for the correct twin: false alarms), the
median and spread of the runs used, and the median wall seconds; `--jsonl` keeps every audit.
`--runs-dir DIR` keeps each row's stores in DIR/<row>_<threat> (default: a temporary folder), so a
later command resumes them. `--fixed N ...` also audits each seed's store by the fixed design of the
same canaries at N runs (`--n-shadow N`, no rounds, at the full confidence; the runs the rounds did
not train are trained then) and prints per N how often its ε verdict was "violated" and its own
curve rejected the claim: the fixed design the rounds are compared with, on the same runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from audit.reporting.verdict import EPSILON_VIOLATED
from dp_bugs import THREATS, WORST_CASE_THREATS
from timing import AuditOutcome, audit_into
from victims.bugs import BUGS, path_of

TWINS = {"dpsgd1": "dpsgd"}


def victim_flags(row: str) -> list[str]:
    victim = TWINS.get(row) or path_of(BUGS[row])
    return ["--victim", victim, "--epsilon", "1", "--epochs", "10"]


def run_audit(row: str, seed: int, n_shadow: int, runs_dir: Path, *, threat: str, rounds: list[str]) -> AuditOutcome:
    """One `audit.lira` audit of `row` at master seed `seed` (its lines on stdout discarded); a row's
    seeds are stores side by side in `runs_dir` (they share dpsgd's pretrained start)."""
    args = [*victim_flags(row), *THREATS[threat], "--claimed-epsilon", "1", "--n-shadow", str(n_shadow), *rounds]
    return audit_into(runs_dir, [*args, "--seed", str(seed)], show=False)


def fixed_audit(row: str, seed: int, n_shadow: int, runs_dir: Path, *, threat: str) -> dict:
    """The fixed design at `n_shadow` runs over the same store: its ε verdict and own-curve test."""
    done = run_audit(row, seed, n_shadow, runs_dir, threat=threat, rounds=[])
    verdict, own = done.result.verdict, done.result.own_curve
    return {
        "runs": n_shadow,
        "eps_violated": verdict is not None and verdict.kind == EPSILON_VIOLATED,
        "own_curve_rejected": None if own is None else bool(own["rejected"]),
        "wall_s": done.wall_s,
    }


def one_audit(
    row: str, seed: int, n_shadow: int, runs_dir: Path, *, threat: str, first_look: int, fixed: list[int]
) -> dict:
    done = run_audit(
        row, seed, n_shadow, runs_dir, threat=threat, rounds=["--until-decided", "--first-look", str(first_look)]
    )
    rounds = done.result.sequential
    return {
        "row": row,
        "threat": threat,
        "seed": seed,
        "stopped": rounds["stopped"],
        "stopped_by": rounds.get("stopped_by"),
        "runs_used": rounds["runs_used"],
        "wall_s": done.wall_s,
        "fixed": [fixed_audit(row, seed, n, runs_dir, threat=threat) for n in fixed],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", nargs="+", default=["a", "b", "g", "dpsgd1"])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--n-shadow", type=int, default=32)
    p.add_argument("--first-look", type=int, default=4)
    p.add_argument("--threat", choices=("white-box", *WORST_CASE_THREATS), default="white-box")
    p.add_argument("--jsonl", type=Path, default=None)
    p.add_argument("--runs-dir", type=Path, default=None, help="keep the stores here (default: a temporary folder)")
    p.add_argument("--fixed", type=int, nargs="*", default=[], help="also the fixed design at these run counts")
    args = p.parse_args()
    for row in args.rows:
        found = []
        with tempfile.TemporaryDirectory() as scratch:
            runs_dir = args.runs_dir / f"{row}_{args.threat}" if args.runs_dir else Path(scratch)
            for seed in range(args.seeds):
                found.append(
                    one_audit(
                        row,
                        seed,
                        args.n_shadow,
                        runs_dir,
                        threat=args.threat,
                        first_look=args.first_look,
                        fixed=args.fixed,
                    )
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
        for k, n in enumerate(args.fixed):
            eps = sum(f["fixed"][k]["eps_violated"] for f in found)
            own = [
                f["fixed"][k]["own_curve_rejected"] for f in found if f["fixed"][k]["own_curve_rejected"] is not None
            ]
            print(
                f"{row:7s} fixed design at {n} runs: ε verdict violated in {eps}/{len(found)}, own curve rejected "
                f"in {sum(own)}/{len(own)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
