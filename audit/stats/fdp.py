"""The f-DP one-run test: lower bounds on a pipeline's privacy curve from the same guesses as the
one-run ε bound of `audit.stats.epsilon`, by the analysis of Mahloujifar, Melis and Chaudhuri.

The theorem ("Auditing f-Differential Privacy in One Run", ICML 2025; their main result for the
membership guessing game, two possible answers per canary, evaluated by their numerical
procedure):

    Let m canaries each be included by an independent fair coin (the rest of the input fixed or
    independent of the coins), let M be f-DP with respect to adding or removing one canary, and
    let a rule that sees M's output but never the coins guess IN or OUT on c' canaries and
    abstain on the rest. Let B = 1 - f be f's blow-up function (B(x): the most probability an
    event of probability x on one side can have on the other) and B⁻¹(y) = inf{x : B(x) >= y}.
    Start from r = τ c / m and h = τ (c' - c) / m and, for i = c - 1, ..., 0, set
        h ← max(h, B⁻¹(r)),    r ← r + i / (c' - i) · (h_new - h_old).
    If the final r + h exceeds c' / m, then P[at least c of the c' guesses are correct] <= τ.

So "M is f-DP" is rejected at level τ when c correct guesses of c' end the recursion above c'/m.
Every r and h is non-decreasing in B⁻¹ (induction over the steps), so a pointwise larger B⁻¹
(a stronger privacy claim: a larger f, a smaller blow-up; a smaller ε or μ) is rejected whenever a
pointwise smaller one is: the bounds below search a one-parameter family by bisection, the
largest rejected ε or μ being the bound (tests/audit/test_fdp.py checks the direction). Once a
step leaves h unchanged, r stays put too and so do all later steps: the loop stops there.

Trade-off families (`TRADEOFFS`), each given by its inverse blow-up:

* ``"eps-delta"``: f_{ε,δ}(x) = max(0, 1 - δ - e^ε x, e^{-ε}(1 - δ - x)), the curve of every
  (ε, δ)-DP mechanism, so B⁻¹(y) = max(0, (y - δ) e^{-ε}, 1 - δ - e^ε (1 - y)). Rejecting it at
  ε is rejecting the (ε, δ) claim itself: a claim's verdict uses this family.
* ``"gaussian"``: G_μ(x) = Φ(Φ⁻¹(1 - x) - μ) (μ-GDP, Dong, Roth and Su), B⁻¹(y) = Φ(Φ⁻¹(y) - μ).
  The largest rejected μ, and the ε at δ that μ-GDP implies (`audit.stats.epsilon.
  gaussian_dp_epsilon`), hold only for a mechanism whose trade-off curve is Gaussian: a pure
  ε-DP mechanism such as randomised response is not μ-GDP at the μ whose (ε, δ) match, so its
  Gaussian ε at δ may exceed its true ε without any false alarm about μ. Descriptive.

With f_{ε,0} the test equals Steinke, Nasr and Jagielski's binomial bound for a perfect attack
and never exceeds it otherwise: it certifies up to 3% less with 10 guesses and under 1% less from
about 100 guesses on. At δ > 0 it does not pay their union term 2mδ, which matters where that term
is large: for strong attacks (a perfect attack on 24,000 canaries at δ = 1e-5 certifies 8.99 with
one guess count fixed in advance, against 8.23), on a Bonferroni grid (2.13 against 1.47 median on
the self-test's Gaussian mechanism at ε0 = 4) and at larger δ; with one tuned count on a moderate
signal the two agree within ~2% (2.31 against 2.27 there) (tests/audit/test_fdp.py, which also
rebuilds jax_privacy's published f-DP figures to 2e-7).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable

TRADEOFFS = ("eps-delta", "gaussian")
_SEARCH_STEPS = 40
_NORMAL = NormalDist()


def check_tradeoff(tradeoff: str) -> str:
    if tradeoff not in TRADEOFFS:
        raise ValueError(f"tradeoff must be one of {', '.join(TRADEOFFS)}, got {tradeoff!r}")
    return tradeoff


def eps_delta_blow_up_inverse(epsilon: float, delta: float) -> Callable[[float], float]:
    """B⁻¹ of f_{ε,δ}: y -> max(0, (y - δ) e^{-ε}, 1 - δ - e^ε (1 - y)).

    Hand check: ε = 0, δ = 0 gives the identity (no privacy loss: an event keeps its probability).
    """
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
    """Whether `correct` right guesses out of `guesses` among `m` canaries reject "f-DP" at level
    `alpha` (the recursion of the module docstring, f given by its inverse blow-up)."""
    _check_counts(m=m, guesses=guesses, correct=correct, alpha=alpha)
    if correct == 0:
        return False
    r = alpha * correct / m
    h = alpha * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        new_h = max(h, blow_up_inverse(r))
        if new_h == h:
            break
        r = min(1.0, r + i / (guesses - i) * (new_h - h))
        h = new_h
    return r + h > guesses / m


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
    loop: the same floating-point operations in the same order, hence the same answers
    (tests/audit/test_fdp.py compares them on a grid), about 5x faster (measured: five ε bounds at
    m = 1,000 to 24,000, 26 ms against 5 ms). It is the
    inner loop of every ε bound's bisection (`fdp_one_run_epsilon`), which an audit's summary step
    and the self-test call hundreds of thousands of times.

    One rewrite that changes no answer: `max(h, max(0, a, b)) == h` exactly when `max(a, b) <= h`,
    since h >= 0 throughout, and a step that leaves h unchanged ends the loop (module docstring)."""
    _check_eps_delta(epsilon, delta)
    _check_counts(m=m, guesses=guesses, correct=correct, alpha=alpha)
    if correct == 0:
        return False
    up, down, kept = math.exp(epsilon), math.exp(-epsilon), 1.0 - delta
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
    return r + h > guesses / m


def gaussian_rejects(mu: float, *, m: int, guesses: int, correct: int, alpha: float) -> bool:
    """`fdp_rejects(gaussian_blow_up_inverse(mu), ...)` with the inverse written into the loop, as
    `eps_delta_rejects` (the same answers; r > 0 throughout, so only the r >= 1 end needs a branch):
    20 repetitions of the self-test's Gaussian design at ε0 = 4 took 2.0 s against 3.7 s."""
    _check_mu(mu)
    _check_counts(m=m, guesses=guesses, correct=correct, alpha=alpha)
    if correct == 0:
        return False
    cdf, inv_cdf = _NORMAL.cdf, _NORMAL.inv_cdf
    r = alpha * correct / m
    h = alpha * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        new_h = 1.0 if r >= 1.0 else cdf(inv_cdf(r) - mu)
        if new_h <= h:
            break
        r = r + i / (guesses - i) * (new_h - h)
        if r > 1.0:
            r = 1.0
        h = new_h
    return r + h > guesses / m


def _largest_rejected(rejected: Callable[[float], bool], *, smallest: float = 0.0) -> float:
    """The largest parameter value that `rejected` rejects (bisection; rejection is monotone,
    module docstring); `smallest` if even that is not rejected."""
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
    """The largest ε whose f_{ε,δ} the guesses reject at level `alpha`; 0 if ε = 0 is not
    rejected. With `at_least`, any ε below it is reported as 0 without a search (a caller that
    only wants to know whether a count beats a bound it already has)."""

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
