"""White-box attacks on the canaries' step observations (`victims.dp.whitebox_canaries`).

Each white-box run stores o [steps, m]. Under the claimed Poisson-subsampled Gaussian (noise multiplier sigma, rate q,
fresh noise each step), OUT: o_t ~ N(0, sigma^2) and IN: o_t ~ (1 - q) N(0, sigma^2) + q N(1, sigma^2), independent over
steps, so the Neyman-Pearson statistic is

    log LR = sum_t log[(1 - q) + q exp((2 o_t - 1) / (2 sigma^2))].

Every score is a valid guessing rule whatever the truth; the derivation only says which is most powerful when the claim
holds. `likelihood_ratio` is that statistic; `summed_projection`, sum_t o_t (robust to a wrong sigma); `step_changes`,
sum_t |o_t - o_{t-1}|, exposes noise drawn once and reused.
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
