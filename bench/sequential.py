"""False alarms and detections of sequential audits (`audit.stats.sequential`) on the self-test's
exact mechanisms, a look after every target run, each look at its share of the error; beside the
same looks each read at the full confidence (what spending prevents).

    python bench/sequential.py [--repetitions 200] [--rows rr gaussian whitebox halved]

Rows (the self-test's sequential rows, `audit.selftest.sequential.sequential_designs`, which
`python -m audit.selftest` judges too; the verdict's rule, counts tuned on as many reference runs):
- `rr`: randomised response at ε0 = 1, 10 target runs x 1,250 canaries, the ε verdict (f_{ε,δ} at δ = 0);
- `gaussian`: the Gaussian mechanism at ε0 = 1 (δ = 1e-5), 10 x 1,500, the ε verdict;
- `whitebox`: the white-box subsampled Gaussian at the claim 1 (σ 7.34, q 0.1024, 300 steps),
  10 x 1,000 gradient canaries, its own curve (slow: about 8 s a repetition on 2 loaded cores);
- `halved`: the same claim 4 of a mechanism that adds half its noise: detections (power), the
  target runs of each repetition's first alarm.

Prints one line per row: alarms of R, the Clopper-Pearson 95% interval, and for the naive reading
(every look at the full confidence) the same; for `halved`, the median and spread of the runs to
the first alarm.
"""

from __future__ import annotations

import argparse
import time
import numpy as np

from audit.selftest.designs import Design
from audit.selftest.sequential import looks_schedule, sequential_designs, sequential_row
from audit.stats.sequential import Schedule


def rows() -> dict[str, tuple[Design, str]]:
    """The self-test's sequential rows (`sequential_designs`), by name."""
    return dict(zip(("rr", "gaussian", "whitebox", "halved"), sequential_designs()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repetitions", type=int, default=200)
    p.add_argument("--rows", nargs="+", default=["rr", "gaussian", "whitebox", "halved"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    spent = looks_schedule(0.95)
    naive = Schedule(spent.runs, 1.0 - 0.05 * spent.looks)  # every share = α: each look at the full confidence
    table = rows()
    for name in args.rows:
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
                runs = np.array(row.first_alarm_runs)
                line += (
                    f"; runs to the first alarm: median {np.median(runs):g}, "
                    f"10th-90th percentile {np.percentile(runs, 10):g}-{np.percentile(runs, 90):g}, max {runs.max()}"
                )
            print(line, flush=True)


if __name__ == "__main__":
    main()
