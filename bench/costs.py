"""Benchmark: what an audit costs on this machine, for the README's first minutes: the seconds one
shadow run of each common victim takes inside its Ray worker, and the wall time of whole
`python -m audit.lira` commands as --n-shadow grows (Ray's start, training, scoring).

    python bench/costs.py [--victims real subset psg dm dpsgd] [--n-shadow 8] [--growth psg 16 64]
                          [--workers 2]

Each command starts from an empty runs directory (every run is trained) with the victim's default
configuration and `--workers 2`. The per-victim rows use --n-shadow runs; the growth rows run the
--growth victim at each listed --n-shadow, and print the fit wall = a + b R (a: fixed costs, b:
seconds per run with the workers sharing the machine), from which any R is predicted.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from timing import timed_audit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victims", nargs="+", default=["real", "subset", "psg", "dm", "dpsgd"])
    p.add_argument("--n-shadow", type=int, default=8)
    p.add_argument("--growth", nargs="+", default=["psg", "16", "64"], help="VICTIM R1 R2 ...")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    workers = ["--workers", str(args.workers)]

    print(f"| victim | one run in its worker, s (median of {args.n_shadow}) | wall of {args.n_shadow} runs, s |")
    print("|---|---|---|")
    for victim in args.victims:
        done = timed_audit(["--victim", victim, "--n-shadow", str(args.n_shadow), *workers])
        print(f"| {victim} | {statistics.median(done.run_seconds):.2f} | {done.wall_s:.1f} |", flush=True)

    victim, sizes = args.growth[0], [int(r) for r in args.growth[1:]]
    walls = []
    print(f"\n| {victim}: --n-shadow R | wall, s | verdict's bound | ceiling |")
    print("|---|---|---|---|")
    for r in sizes:
        done = timed_audit(["--victim", victim, "--n-shadow", str(r), *workers])
        walls.append(done.wall_s)
        found = done.result.bound or {}
        bound, ceiling = found.get("eps_lower", float("nan")), found.get("eps_ceiling", 0)
        print(f"| {r} | {done.wall_s:.1f} | {bound:.2f} | {ceiling:.2f} |")
    if len(sizes) >= 2:
        b, a = np.polyfit(sizes, walls, 1)
        print(f"\nwall ~ {a:.0f} s + {b:.2f} s x R ({victim}, {args.workers} workers); R = 256: {a + 256 * b:.0f} s")


if __name__ == "__main__":
    main()
