"""Formal epsilon through opacus's accountants (RDP by default, PRV optional); never by hand.

opacus is imported where it is used: it takes ~1.7 s to import, which every Ray worker of a
non-DP victim would otherwise pay.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

ACCOUNTANTS = ("rdp", "prv")


@contextlib.contextmanager
def _quiet_orders():
    """opacus warns "optimal order is the largest alpha" when few steps put the optimum at the
    edge of its default orders; the bound it returns is still valid (an upper bound on epsilon),
    so every victim hears it as noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Oo]ptimal order.*", category=UserWarning)
        yield


def _check(*, epsilon: float | None = None, delta: float, sample_rate: float, steps: int, accountant: str) -> None:
    if epsilon is not None and not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")


@functools.lru_cache(maxsize=64)
def noise_multiplier_for(*, epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "rdp") -> float:
    """The noise multiplier sigma with which `steps` Poisson-subsampled Gaussian steps at
    `sample_rate` spend (epsilon, delta) under `accountant` (opacus's search, tolerance 0.01).

    Memoised: opacus's search takes 1-3 s, and a Ray worker meets the same few member counts
    (hence sample rates) run after run."""
    from opacus.accountants.utils import get_noise_multiplier

    _check(epsilon=epsilon, delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant)
    with _quiet_orders():
        return float(get_noise_multiplier(
            target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant
        ))


def epsilon_spent(*, noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    """The accountant's epsilon at `delta` after `steps` subsampled Gaussian steps."""
    from opacus.accountants import create_accountant

    _check(delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant)
    acc = create_accountant(mechanism=accountant)
    acc.history = [(noise_multiplier, sample_rate, steps)]
    with _quiet_orders():
        return float(acc.get_epsilon(delta=delta))
