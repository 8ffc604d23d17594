"""Benchmark: shadow runs per hour of `python -m audit.lira --victim V --n-shadow R`, by Ray
worker count and by runs per task (packed runs, `--runs-per-task K`).

    python bench/workers.py [--n-shadow 64] [--victim real] [--workers 1 2] [--runs-per-task 1]
                            [--repeats 1] [any audit flag, e.g. --gpus-per-run 0.25 --device cuda]

Prints, per (workers, K), the wall time of the whole command (Ray start, training, scoring), the
mean seconds one shadow run took inside its task (a packed task's time shared by its K runs), the
shadow runs per hour of the whole command, and the speed-up over the first combination. Each
command starts from an empty runs directory, so every run is trained. With --repeats N the
combinations alternate N times and the median speed-up is printed: on a shared virtual machine
the speed of a single run drifts by 30% over minutes, which a single pair of commands can mistake
for a change in the speed-up. Flags it does not know go to every audit command unchanged.
"""

from __future__ import annotations

import argparse
import itertools
import statistics

from timing import timed_audit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victim", default="real")
    p.add_argument("--n-shadow", type=int, default=64)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs-per-task", type=int, nargs="+", default=[1], help="K values to compare")
    p.add_argument("--repeats", type=int, default=1)
    args, extra = p.parse_known_args()
    print(f"victim={args.victim} n_shadow={args.n_shadow} {' '.join(extra)}")
    combinations = list(itertools.product(args.workers, args.runs_per_task))
    speedups: dict[tuple[int, int], list[float]] = {c: [] for c in combinations}
    for _ in range(args.repeats):
        baseline = None
        for workers, k in combinations:
            done = timed_audit(
                [
                    "--victim",
                    args.victim,
                    "--n-shadow",
                    str(args.n_shadow),
                    "--workers",
                    str(workers),
                    "--runs-per-task",
                    str(k),
                    *extra,
                ]
            )
            wall, per_run = done.wall_s, sum(done.run_seconds) / len(done.run_seconds)
            baseline = baseline or wall
            speedups[workers, k].append(baseline / wall)
            print(
                f"workers={workers} runs_per_task={k}: wall {wall:7.1f} s   {per_run:5.2f} s per shadow run (in "
                f"its task)   {3600 * args.n_shadow / wall:7.0f} runs per hour   speed-up x{baseline / wall:.2f}",
                flush=True,
            )
    if args.repeats > 1:
        print(
            "median speed-up: "
            + ", ".join(f"workers={w} K={k} x{statistics.median(s):.2f}" for (w, k), s in speedups.items())
        )


if __name__ == "__main__":
    main()
