"""False alarms and detections of sequential audits (`audit.stats.sequential`) on the self-test's
exact mechanisms, a look after every target run, each look at its share of the error; beside the
same looks each read at the full confidence (what spending prevents).

    python bench/sequential.py [--repetitions 200] [--rows rr gaussian whitebox halved gaussian-both ...]

Rows (the self-test's sequential rows, `audit.selftest.sequential.sequential_designs`, which
`python -m audit.selftest` judges too; the verdict's rule, counts tuned on as many reference runs):
- `rr`: randomised response at ε0 = 1, 10 target runs x 1,250 canaries, the ε verdict (f_{ε,δ} at δ = 0);
- `gaussian`: the Gaussian mechanism at ε0 = 1 (δ = 1e-5), 10 x 1,500, the ε verdict;
- `whitebox`: the white-box subsampled Gaussian at the claim 1 (σ 7.34, q 0.1024, 300 steps),
  10 x 1,000 gradient canaries, its own curve (slow: about 8 s a repetition on 2 loaded cores);
- `halved`: the same claim 4 of a mechanism that adds half its noise: detections (power), the
  target runs of each repetition's first alarm;
- `gaussian-both`, `whitebox-both`, `halved-both`: the rule of audits whose runs record a mechanism
  (`audit.selftest.sequential.combined_row`): each look runs the ε verdict and the own curve, each
  at α_k / 2, and rejects if either does; an alarm is a repetition with some look of either test
  above its own truth (no naive reading; which test stopped each alarmed repetition).

Prints one line per row: alarms of R, the Clopper-Pearson 95% interval, and for the naive reading
(every look at the full confidence) the same; for `halved`, the median and spread of the runs to
the first alarm.
"""

from __future__ import annotations

import argparse
import time
import numpy as np

from audit.selftest.designs import Design
from audit.selftest.sequential import (
    BOTH_TESTS,
    combined_designs,
    combined_row,
    looks_schedule,
    sequential_designs,
    sequential_row,
)
from audit.stats.sequential import Schedule

SINGLE = ("rr", "gaussian", "whitebox", "halved")
COMBINED = ("gaussian-both", "whitebox-both", "halved-both")


def rows() -> dict[str, tuple[Design, str]]:
    """The self-test's sequential rows (`sequential_designs`), by name."""
    return dict(zip(SINGLE, sequential_designs()))


def runs_line(first_alarm_runs: tuple[int, ...]) -> str:
    runs = np.array(first_alarm_runs)
    return (
        f"; runs to the first alarm: median {np.median(runs):g}, "
        f"10th-90th percentile {np.percentile(runs, 10):g}-{np.percentile(runs, 90):g}, max {runs.max()}"
    )


def combined(name: str, design: Design, repetitions: int, seed: int) -> None:
    """One row of both tests a look, each at α_k / 2 (`combined_row`)."""
    start = time.perf_counter()
    row = combined_row(design, looks_schedule(0.95, tests=len(BOTH_TESTS)), repetitions=repetitions, seed=seed)
    low, high = row.interval
    by = ", ".join(f"{test} {row.stopped_by.count(test)}" for test in sorted(set(row.stopped_by)))
    counted = "detections" if design.noise_halved else "alarms"
    line = (
        f"{name:13s} spent, both tests at alpha_k/2: {row.alarms}/{row.repetitions} {counted} "
        f"({100 * row.alarms / row.repetitions:.1f}%, 95% CI {100 * low:.1f}-{100 * high:.1f}%), {row.looks} looks, "
        f"{time.perf_counter() - start:.0f} s; stopped by: {by or '-'}"
    )
    if design.noise_halved and row.first_alarm_runs:
        line += runs_line(row.first_alarm_runs)
    print(line, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repetitions", type=int, default=200)
    p.add_argument("--rows", nargs="+", choices=SINGLE + COMBINED, default=list(SINGLE))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    spent = looks_schedule(0.95)
    naive = Schedule(spent.runs, 1.0 - 0.05 * spent.looks)  # every share = α: each look at the full confidence
    table = rows()
    both = dict(zip(COMBINED, combined_designs()))
    for name in args.rows:
        if name in both:
            combined(name, both[name], args.repetitions, args.seed)
            continue
        design, analysis = table[name]
        for label, schedule in (("spent", spent), ("naive", naive)):
            if name == "halved" and label == "naive":
                continue
            start = time.perf_counter()
            row = sequential_row(design, schedule, analysis=analysis, repetitions=args.repetitions, seed=args.seed)
            low, high = row.interval
            line = (
                f"{name:9s} {label}: {row.alarms}/{row.repetitions} alarms ({100 * row.alarms / row.repetitions:.1f}%, "
                f"95% CI {100 * low:.1f}-{100 * high:.1f}%), {row.looks} looks, {time.perf_counter() - start:.0f} s"
            )
            if name == "halved" and row.first_alarm_runs:
                line += runs_line(row.first_alarm_runs)
            print(line, flush=True)


if __name__ == "__main__":
    main()
