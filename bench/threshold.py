"""Many runs of one neighbour pair: the exact threshold test against the Clopper–Pearson baseline on a
Gaussian mechanism, over seeds.

    python bench/threshold.py [--mu 0.455] [--delta 1e-2] [--splits 500:4500 1000:9000] [--seeds 20]
                              [--confidences 0.9 0.95] [--alarms 0]

Per seed and split R:J, R reference and J judged runs per side, each run's score OUT ~ N(0, 1) and
IN ~ N(μ, 1): exactly μ-GDP (Dong, Roth and Su). `audit.stats.threshold.threshold_audit` chooses
the direction and threshold on the references, once for μ and once for ε at δ, counts the judged
runs there, and bounds μ and ε both ways: the exact test (`audit.stats.pair_test`) and Nasr et al.'s
Clopper–Pearson baseline at (1 - confidence)/2 per rate. Printed per (split, confidence): the median
and the 10th-90th percentiles over the seeds of each. The same seeds give the same scores at both
confidences. About 3 minutes with the defaults on one core. With `--alarms N`, instead: false alarms
of the exact μ test at the true μ (level 0.05, the threshold chosen on the references) in N
repetitions from seed 1,000, at tests/audit/test_threshold.py's two settings (μ = 0.5, 500
reference + 1,000 judged per side; μ = 1.0, 200 + 500); about 45 s per setting per 1,000.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from audit.selftest.mechanisms import gaussian_mu
from audit.stats.epsilon import gaussian_dp_epsilon
from audit.stats import pair_test
from audit.stats.threshold import choose_threshold, exact_statistic, threshold_audit


def spread(values: list[float]) -> str:
    q10, q50, q90 = np.quantile(values, [0.1, 0.5, 0.9])
    return f"{q50:.3f} [{q10:.3f}, {q90:.3f}]"


def measure(mu: float, delta: float, references: int, judged: int, seeds: int, confidence: float) -> dict:
    found: dict[str, list[float]] = {"mu": [], "mu_cp": [], "eps": [], "eps_cp": []}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        scores = (rng.normal(mu, 1.0, references), rng.normal(0.0, 1.0, references))
        scores += (rng.normal(mu, 1.0, judged), rng.normal(0.0, 1.0, judged))
        for_mu = threshold_audit(*scores, delta=delta, confidence=confidence, objective="mu")
        for_eps = threshold_audit(*scores, delta=delta, confidence=confidence, objective="epsilon")
        found["mu"].append(for_mu.mu_lower)
        found["mu_cp"].append(for_mu.mu_lower_baseline)
        found["eps"].append(for_eps.epsilon_lower)
        found["eps_cp"].append(for_eps.epsilon_lower_baseline)
    return found


def alarms(mu: float, references: int, judged: int, repetitions: int, first_seed: int = 1000) -> int:
    """Rejections of the true μ at level 0.05, as tests/audit/test_threshold.py's `alarms` counts them."""
    count = 0
    for seed in range(first_seed, first_seed + repetitions):
        rng = np.random.default_rng(seed)
        ref_in, ref_out = rng.normal(mu, 1.0, references), rng.normal(0.0, 1.0, references)
        judged_in, judged_out = rng.normal(mu, 1.0, judged), rng.normal(0.0, 1.0, judged)
        choice = choose_threshold(ref_in, ref_out, n_in=judged, n_out=judged)
        tp = int(np.sum(choice.sign * judged_in >= choice.threshold))
        fp = int(np.sum(choice.sign * judged_out >= choice.threshold))
        sizes = (references, references)
        statistic = exact_statistic(
            pair_test.gaussian_curve, choice, n_in=judged, n_out=judged, reference_sizes=sizes, confidence=0.95
        )
        count += pair_test.rejects(pair_test.gaussian_curve(mu), tp=tp, fp=fp, statistic=statistic, alpha=0.05)
    return count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mu", type=float, default=0.455)
    p.add_argument("--delta", type=float, default=1e-2)
    p.add_argument("--splits", nargs="+", default=["500:4500", "1000:9000"], help="reference:judged runs per side")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--confidences", nargs="+", type=float, default=[0.9, 0.95])
    p.add_argument("--alarms", type=int, default=0, help="count false alarms in this many repetitions instead")
    args = p.parse_args()
    if args.alarms:
        for mu, references, judged in ((0.5, 500, 1000), (1.0, 200, 500)):
            found = alarms(mu, references, judged, args.alarms)
            print(f"mu = {mu}, {references} + {judged} per side: {found} false alarms of {args.alarms}")
        return
    true_eps = gaussian_dp_epsilon(args.mu, args.delta)
    print(f"mu = {args.mu}: its eps at delta = {args.delta:g} is {true_eps:.3f}; ", end="")
    print(f"the mu whose eps at that delta is 1: {gaussian_mu(1.0, args.delta):.3f}")
    print(f"median [10th, 90th percentile] over {args.seeds} seeds\n")
    print(
        f"| reference:judged per side | confidence | mu, exact | mu, CP | eps at {args.delta:g}, exact | eps, CP | s |"
    )
    print("|---|---|---|---|---|---|---|")
    for split in args.splits:
        references, judged = (int(x) for x in split.split(":"))
        for confidence in args.confidences:
            start = time.perf_counter()
            found = measure(args.mu, args.delta, references, judged, args.seeds, confidence)
            cells = " | ".join(spread(found[key]) for key in ("mu", "mu_cp", "eps", "eps_cp"))
            print(f"| {references:,}:{judged:,} | {confidence:g} | {cells} | {time.perf_counter() - start:.0f} |")


if __name__ == "__main__":
    main()
