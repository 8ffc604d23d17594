"""The most any guess count can certify on a Gaussian mechanism at a given m: an oracle for the
self-test's power row.

    python bench/oracle_power.py [--epsilon 4] [--delta 1e-5] [--m 24000]

Per canary the output is coin·μ + N(0, 1), μ-GDP with ε(μ, δ) = ε0 (`audit.selftest.mechanisms.
gaussian_mu`). For thresholds t on that optimal score it takes the expected counts (m/2 members,
m/2 non-members: the top guesses IN above t, and as many bottom guesses OUT by symmetry, or IN
only) and bounds them at the full level, as if the best count had been known in advance. No
tuning rule can beat this on average; the self-test's tuned medians are measured against it.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.stats import norm

from audit.stats.epsilon import gaussian_dp_epsilon
from audit.stats.guesses import bound_at
from audit.selftest.mechanisms import gaussian_mu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epsilon", type=float, default=4.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--m", type=int, default=24000)
    p.add_argument("--confidence", type=float, default=0.95)
    args = p.parse_args()
    mu, half = gaussian_mu(args.epsilon, args.delta), args.m / 2
    best: dict[str, tuple[float, float, int, int]] = {}
    for t in np.linspace(0.0, 6.0, 241):
        true_in, false_in = half * norm.sf(t - mu), half * norm.sf(t)
        for sides in (1, 2):  # IN guesses only, or as many OUT guesses at the bottom
            guesses, correct = int(round(sides * (true_in + false_in))), int(round(sides * true_in))
            if not 1 <= guesses <= args.m:
                continue
            for analysis in ("steinke", "fdp", "gaussian"):
                value = bound_at(
                    analysis, m=args.m, guesses=guesses, correct=correct, delta=args.delta, alpha=1.0 - args.confidence
                )
                if value > best.get(analysis, (0.0,))[0]:
                    best[analysis] = (value, float(t), guesses, correct)
    print(
        f"Gaussian mechanism eps0 {args.epsilon:g} at delta {args.delta:g} (mu {mu:.4f}), m = {args.m:,}, "
        f"{args.confidence:.0%}: the best expected-count bound over thresholds"
    )
    for analysis, (value, t, guesses, correct) in best.items():
        extra = f" (eps {gaussian_dp_epsilon(value, args.delta):.3f} at delta)" if analysis == "gaussian" else ""
        print(f"  {analysis:<8} {value:.3f}{extra}  threshold {t:.3f}: {correct} of {guesses} guesses right")


if __name__ == "__main__":
    main()
