"""Benchmark: wall time of `python -m audit.lira --victim real --n-shadow R` with 1 and 2 Ray workers.

    python bench/workers.py [--n-shadow 64] [--victim real] [--workers 1 2] [--repeats 1]

Prints, per worker count, the wall time of the whole command (Ray start, training, scoring), the
mean seconds one shadow run took inside its worker, and the speed-up over the first count.
Each command starts from an empty runs directory, so every run is trained. With --repeats N the
worker counts alternate N times and the median speed-up is printed: on a shared virtual machine
the speed of a single run drifts by 30% over minutes, which a single pair of commands can mistake
for a change in the speed-up.
"""

from __future__ import annotations

import argparse
import statistics

from timing import timed_audit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victim", default="real")
    p.add_argument("--n-shadow", type=int, default=64)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeats", type=int, default=1)
    args, extra = p.parse_known_args()
    print(f"victim={args.victim} n_shadow={args.n_shadow} {' '.join(extra)}")
    speedups: dict[int, list[float]] = {w: [] for w in args.workers}
    for _ in range(args.repeats):
        baseline = None
        for workers in args.workers:
            wall, runs, _ = timed_audit(["--victim", args.victim, "--n-shadow", str(args.n_shadow),
                                         "--workers", str(workers), *extra])
            per_run = sum(runs) / len(runs)
            baseline = baseline or wall
            speedups[workers].append(baseline / wall)
            print(f"workers={workers}: wall {wall:7.1f} s   {per_run:5.2f} s per shadow run (in its worker)   "
                  f"{wall / args.n_shadow:5.2f} s per run overall   speed-up x{baseline / wall:.2f}", flush=True)
    if args.repeats > 1:
        print("median speed-up: " + ", ".join(f"workers={w} x{statistics.median(s):.2f}" for w, s in speedups.items()))


if __name__ == "__main__":
    main()
