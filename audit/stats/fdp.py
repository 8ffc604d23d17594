"""The f-DP one-run test (Mahloujifar, Melis and Chaudhuri, "Auditing f-Differential Privacy in One Run", ICML 2025;
their main result for the membership guessing game, by their numerical procedure): for m canaries included by
independent fair coins, M f-DP with respect to adding or removing one canary, and c' guesses by a rule that never sees
the coins, c of them right, the recursion of `fdp_rejects` ending above c'/m rejects "M is f-DP" at level τ. Rejection
is monotone in the claim, so each bound is the largest rejected ε or μ by bisection (docs/contracts.md "The f-DP test").

Families (`TRADEOFFS`): ``"eps-delta"``, f_{ε,δ}, the curve of every (ε, δ)-DP mechanism (the verdict's);
``"gaussian"``, G_μ (μ-GDP, Dong, Roth and Su), descriptive: valid only for a mechanism whose trade-off curve is
Gaussian.
"""

from __future__ import annotations

import math
import statistics
from statistics import NormalDist
from typing import Callable

TRADEOFFS = ("eps-delta", "gaussian")
_SEARCH_STEPS = 40
_NORMAL = NormalDist()
# Φ and Φ⁻¹ as `_NORMAL.cdf` and `_NORMAL.inv_cdf` compute them (statistics.py, μ = 0, σ = 1): cdf(x) is
# 0.5 (1 + erf((x - 0.0) / (1.0 · √2))), the same floats as 0.5 (1 + erf(x / √2)); inv_cdf(p) is, for 0 < p < 1,
# its module's `_normal_dist_inv_cdf(p, 0.0, 1.0)`. Called directly in `gaussian_rejects`'s loop: same answers
# (tests/audit/test_fdp.py), fewer calls.
_SQRT2 = math.sqrt(2.0)
_INV_CDF = statistics._normal_dist_inv_cdf


def check_tradeoff(tradeoff: str) -> str:
    if tradeoff not in TRADEOFFS:
        raise ValueError(f"tradeoff must be one of {', '.join(TRADEOFFS)}, got {tradeoff!r}")
    return tradeoff


def eps_delta_blow_up_inverse(epsilon: float, delta: float) -> Callable[[float], float]:
    """B⁻¹ of f_{ε,δ}: y -> max(0, (y - δ) e^{-ε}, 1 - δ - e^ε (1 - y)) (the identity at ε = δ = 0)."""
    _check_eps_delta(epsilon, delta)
    up, down = math.exp(epsilon), math.exp(-epsilon)

    def inverse(y: float) -> float:
        return max(0.0, (y - delta) * down, 1.0 - delta - up * (1.0 - y))

    return inverse


def gaussian_blow_up_inverse(mu: float) -> Callable[[float], float]:
    """B⁻¹ of μ-GDP: y -> Φ(Φ⁻¹(y) - μ) (0 at y <= 0, 1 at y >= 1)."""
    _check_mu(mu)

    def inverse(y: float) -> float:
        if y <= 0.0:
            return 0.0
        if y >= 1.0:
            return 1.0
        return _NORMAL.cdf(_NORMAL.inv_cdf(y) - mu)

    return inverse


def fdp_rejects(blow_up_inverse: Callable[[float], float], *, m: int, guesses: int, correct: int, alpha: float) -> bool:
    """Whether `correct` right guesses of `guesses` among `m` canaries reject "f-DP" at level `alpha`: from r = α c / m,
    h = α (c' - c) / m, for i = c - 1..0, h ← max(h, B⁻¹(r)), r ← r + i / (c' - i) · (h_new - h_old); reject if r + h >
    c' / m. B⁻¹ is f's inverse blow-up (B = 1 - f); a step that leaves h unchanged leaves every later one so. Neither r
    nor h ever falls, nor (rounding being monotone) does their floating-point sum, so the test stops at the first step
    whose r + h is above c' / m: the answer the last step gives."""
    _check_counts(m=m, guesses=guesses, correct=correct, alpha=alpha)
    if correct == 0:
        return False
    threshold = guesses / m
    r = alpha * correct / m
    h = alpha * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        new_h = max(h, blow_up_inverse(r))
        if new_h == h:
            break
        r = min(1.0, r + i / (guesses - i) * (new_h - h))
        h = new_h
        if r + h > threshold:
            return True
    return r + h > threshold


def _check_eps_delta(epsilon: float, delta: float) -> None:
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")


def _check_mu(mu: float) -> None:
    if not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu must be finite and >= 0, got {mu}")


def _check_counts(*, m: int, guesses: int, correct: int, alpha: float) -> None:
    if not 0 <= correct <= guesses <= m or m < 1:
        raise ValueError(f"need 0 <= correct <= guesses <= m and m >= 1, got {correct}, {guesses}, {m}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def eps_delta_rejects(epsilon: float, delta: float, *, m: int, guesses: int, correct: int, alpha: float) -> bool:
    """`fdp_rejects(eps_delta_blow_up_inverse(epsilon, delta), ...)` with the inverse written into the
    loop: the same floating-point operations and the same early stop, hence the same answers (tests/audit/test_fdp.py),
    faster."""
    _check_eps_delta(epsilon, delta)
    _check_counts(m=m, guesses=guesses, correct=correct, alpha=alpha)
    if correct == 0:
        return False
    up, down, kept = math.exp(epsilon), math.exp(-epsilon), 1.0 - delta
    threshold = guesses / m
    r = alpha * correct / m
    h = alpha * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        below, above = (r - delta) * down, kept - up * (1.0 - r)
        new_h = below if below > above else above
        if new_h <= h:
            break
        r = r + i / (guesses - i) * (new_h - h)
        if r > 1.0:
            r = 1.0
        h = new_h
        if r + h > threshold:
            return True
    return r + h > threshold


def gaussian_rejects(mu: float, *, m: int, guesses: int, correct: int, alpha: float) -> bool:
    """`fdp_rejects(gaussian_blow_up_inverse(mu), ...)` with the inverse inlined, as `eps_delta_rejects`."""
    _check_mu(mu)
    _check_counts(m=m, guesses=guesses, correct=correct, alpha=alpha)
    if correct == 0:
        return False
    erf, inv_cdf = math.erf, _INV_CDF
    threshold = guesses / m
    r = alpha * correct / m  # > 0 and never falling: inv_cdf's 0 < r < 1 holds where it is called
    h = alpha * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        new_h = 1.0 if r >= 1.0 else 0.5 * (1.0 + erf((inv_cdf(r, 0.0, 1.0) - mu) / _SQRT2))
        if new_h <= h:
            break
        r = r + i / (guesses - i) * (new_h - h)
        if r > 1.0:
            r = 1.0
        h = new_h
        if r + h > threshold:
            return True
    return r + h > threshold


def _largest_rejected(rejected: Callable[[float], bool], *, smallest: float = 0.0) -> float:
    """The largest parameter `rejected` rejects (bisection); `smallest` if even that is not rejected."""
    if not rejected(smallest):
        return smallest
    low, high = smallest, max(1.0, 2.0 * smallest)
    while rejected(high):
        low, high = high, 2.0 * high
        if high > 1e6:
            return math.inf
    for _ in range(_SEARCH_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if rejected(middle) else (low, middle)
    return low


def fdp_one_run_epsilon(
    *, m: int, guesses: int, correct: int, delta: float, alpha: float, at_least: float = 0.0
) -> float:
    """The largest ε whose f_{ε,δ} the guesses reject at level `alpha`; 0 if ε = 0 is not rejected,
    or (without a search) if `at_least` is not."""

    def rejected(epsilon: float) -> bool:
        return eps_delta_rejects(epsilon, delta, m=m, guesses=guesses, correct=correct, alpha=alpha)

    if at_least > 0.0 and not rejected(at_least):
        return 0.0
    return _largest_rejected(rejected, smallest=at_least)


def gaussian_one_run_mu(*, m: int, guesses: int, correct: int, alpha: float, at_least: float = 0.0) -> float:
    """The largest μ whose μ-GDP the guesses reject at level `alpha`; 0 if none is."""

    def rejected(mu: float) -> bool:
        return gaussian_rejects(mu, m=m, guesses=guesses, correct=correct, alpha=alpha)

    if at_least > 0.0 and not rejected(at_least):
        return 0.0
    if at_least == 0.0 and not rejected(1e-12):
        return 0.0
    return _largest_rejected(rejected, smallest=at_least)
