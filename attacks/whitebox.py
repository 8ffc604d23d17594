"""White-box attacks on the canaries' step observations (`victims.dp.whitebox_canaries`).

Each white-box run stores o [steps, m]: canary j's projection of each step's noisy sum, over the
sensitivity Delta. Under the mechanism the victim claims (the Poisson-subsampled Gaussian at its
public noise multiplier sigma and sample rate q, fresh noise at every step), and ignoring the
other records' share of the sum,

    OUT: o_t ~ N(0, sigma^2)                      (the canary is not in the data set)
    IN:  o_t ~ (1 - q) N(0, sigma^2) + q N(1, sigma^2)   (sampled with probability q, then adding
                                                    exactly Delta along its direction)

independently over the steps given the canary's coin (each step's noise and Poisson draw are
fresh). So the Neyman-Pearson statistic for IN against OUT is the log likelihood ratio

    log LR = sum_t log[(1 - q) + q exp((2 o_t - 1) / (2 sigma^2))],

since phi((o - 1)/sigma) / phi(o/sigma) = exp((2 o - 1) / (2 sigma^2)). At q = 1 it is
(2 sum_t o_t - T) / (2 sigma^2), a monotone function of the sum. Every score below is a valid
guessing rule for the one-run bound whatever the truth (the bound holds for any scores computed
from the output); the derivation only says which one is most powerful when the claim holds.

* `likelihood_ratio`: the statistic above, at the run's recorded sigma and q;
* `summed_projection`: sum_t o_t, the plain score (most powerful at q = 1; robust to a sigma the
  claim gets wrong);
* `step_changes`: sum_t |o_t - o_{t-1}|: the canary's own draws in and out of the batches. Fresh
  noise at every step hides them (each change has variance 2 sigma^2 whatever the coin); noise
  drawn once and reused cancels in every difference, leaving the canary's contributions bare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np


def likelihood_ratio(observations: np.ndarray, *, noise_multiplier: float, sample_rate: float) -> np.ndarray:
    """log LR of IN against OUT per canary, from o [..., steps, m] (derivation in the module docstring)."""
    o = np.asarray(observations, dtype=np.float64)
    if not noise_multiplier > 0:  # no noise claimed: any o above 0 is a canary's contribution
        return o.sum(axis=-2)
    shift = (2.0 * o - 1.0) / (2.0 * noise_multiplier**2)
    if sample_rate >= 1.0:
        return shift.sum(axis=-2)
    return np.logaddexp(np.log1p(-sample_rate), np.log(sample_rate) + shift).sum(axis=-2)


def summed_projection(observations: np.ndarray) -> np.ndarray:
    """sum_t o_t per canary."""
    return np.asarray(observations, dtype=np.float64).sum(axis=-2)


def step_changes(observations: np.ndarray) -> np.ndarray:
    """sum_t |o_t - o_{t-1}| per canary (0 for a single step)."""
    return np.abs(np.diff(np.asarray(observations, dtype=np.float64), axis=-2)).sum(axis=-2)


def run_scores(
    statistic: Callable[[np.ndarray, Mapping], np.ndarray],
    whitebox: np.ndarray,
    mechanism: list[Mapping],
    rows: np.ndarray,
    n: int,
    targets: np.ndarray,
) -> np.ndarray:
    """[T, n] scores of each target run: `statistic`(its canaries' observations [steps, m], its
    mechanism's noise_multiplier and sample_rate) from whitebox [R, steps, m] and mechanism [R], on
    the canary `rows`, NaN on every other row (the white-box attacks score canaries only)."""
    out = np.full((len(targets), n), np.nan)
    for i, r in enumerate(np.asarray(targets).reshape(-1)):
        out[i, rows] = statistic(whitebox[r], mechanism[r])
    return out
