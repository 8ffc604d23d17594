"""The self-test's marginal-count rows alone (`audit.selftest.designs.marginal_designs`), through the
command's code paths: per row, rule and analysis, the alarms (bound above the truth) with their 95%
Clopper-Pearson interval and the bounds' median, 10th and 90th percentiles.

    python bench/selftest_marginals.py [--repetitions 200]

`python -m audit.selftest` judges the same rows among all the others (docs/results/selftest.md).
"""

import argparse
import time

import numpy as np

from audit.selftest.designs import bounds, clopper_pearson, false_alarms, marginal_designs, truth, values_of
from audit.stats.bounds import ANALYSES
from audit.stats.guesses import RULES, BoundCache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=200)
    reps = parser.parse_args().repetitions
    cache = BoundCache()
    for design in marginal_designs():
        start = time.time()
        found = bounds(design, repetitions=reps, seed=0, cache=cache)
        print(f"{design.name}, m = {design.m:,}{'' if design.judged else ' (not judged: a false claim)'}")
        for rule in RULES:
            for analysis in ANALYSES:
                values = values_of(found, rule, analysis)
                alarms = false_alarms(design, found, rule, analysis)
                if alarms is None or np.all(np.isnan(values)):
                    continue
                low, high = clopper_pearson(alarms, reps)
                print(
                    f"  {rule:5s} {analysis:9s} truth {truth(design, analysis):.3f}  alarms {alarms}/{reps} "
                    f"[{low:.3f}, {high:.3f}]  median {np.median(values):.3f} "
                    f"(p10 {np.percentile(values, 10):.3f}, p90 {np.percentile(values, 90):.3f})"
                )
        print(f"  ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
