"""The guess count fixed in advance (`audit.stats.guesses.fixed_count`, about 4√m, half IN) against
the best count of the tuned rule's candidates, on Gaussian scores.

    python bench/fixed_count.py [--m 64 256 1024] [--mu 1 1.5 2 3] [--reps 60] [--seed 0]

For every m and μ: `--reps` repetitions of m fair coins, a member scoring N(μ, 1) and a non-member
N(0, 1); each candidate count of `tuned_candidates(m)` tested by the verdict's f_{ε,δ} test at
95% (δ = 1e-5). Prints the median bound of the fixed count, of the candidate with the best median
(chosen after the fact: an oracle no audit has), and their ratio. The fixed count is what a verdict
uses when the reference runs predict 0 for every attack; the ratio is what that costs in power
against the oracle.
"""

from __future__ import annotations

import argparse

import numpy as np

from audit.stats.bounds import VERDICT_BOUND
from audit.stats.epsilon import RankedGuesses
from audit.stats.guesses import BoundCache, best_count, fixed_count, tuned_candidates

DELTA, ALPHA = 1e-5, 0.05


def median_bounds(m: int, mu: float, reps: int, rng: np.random.Generator) -> dict:
    """candidate count -> its median bound over `reps` draws of m Gaussian canaries at separation mu."""
    found = {count: [] for count in tuned_candidates(m)}
    cache = BoundCache()
    for _ in range(reps):
        coins = rng.random(m) < 0.5
        scores = rng.normal(size=m) + mu * coins
        ranked = RankedGuesses.of(scores[coins], scores[~coins], rng=rng)
        for count in found:
            bound = best_count(ranked, (count,), analysis=VERDICT_BOUND.name, delta=DELTA, alpha=ALPHA, cache=cache)[0]
            found[count].append(bound)
    return {count: float(np.median(bounds)) for count, bounds in found.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--mu", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0])
    p.add_argument("--reps", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    print("m     mu    fixed count   its median   best count   its median   fixed / best")
    for m in args.m:
        fixed = fixed_count(m)
        for mu in args.mu:
            medians = median_bounds(m, mu, args.reps, rng)
            best = max(medians, key=medians.get)
            ratio = medians[fixed] / medians[best] if medians[best] > 0 else float("nan")
            print(
                f"{m:<5d} {mu:<5g} ({fixed.k_in},{fixed.k_out}){'':<6} {medians[fixed]:10.2f}   "
                f"({best.k_in},{best.k_out}){'':<5} {medians[best]:10.2f}   {ratio:10.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
