"""Lower confidence bounds on a training pipeline's ε by one-run auditing (Steinke, Nasr and
Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023; its main theorem and the
approximate-DP extension of its Section 5): for m canaries included by independent fair coins, M
(ε, δ)-DP with respect to adding or removing one canary, and r guesses by a rule that never sees
the coins, the number W of correct guesses obeys
    P[W >= v] <= P[Binomial(r, p) >= v] + 2 m δ · max_{1<=i<=v} P[v-i <= Binomial(r, p) < v] / i,
p = e^ε / (1 + e^ε) (the first term alone at δ = 0). `one_run_audit` tests a grid fixed by m at
level (1 - confidence) / |grid| (Bonferroni): the bound holds with probability >= confidence
whatever the true ε. Fair coins only. docs/contracts.md "The one-run bound", "The ceiling".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

#: the coin probability the theorem is proven for (`bound_applies`)
FAIR_COIN_RATE = 0.5
#: fraction of the m canaries guessed on, for each grid point (fixed before any data is seen)
GUESS_FRACTIONS = tuple(2.0**-k for k in range(12))
#: share of the guesses that are IN guesses (1: only the top scores; 0.5: as many from the bottom)
IN_SHARES = (1.0, 0.5)
#: the most canaries `audit.stats.guesses.canaries_needed` and `most_certifiable` consider
MOST_CANARIES = 2**24
_SEARCH_STEPS = 40


def as_score_array(scores, *, name: str) -> np.ndarray:
    """Return ``scores`` as a 1-d float array; ValueError if empty or non-finite."""
    array = np.asarray(scores, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-d, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} must be non-empty, got {array.size} scores")
    bad = ~np.isfinite(array)
    if bad.any():
        raise ValueError(
            f"{name} must be finite, got {int(bad.sum())} non-finite value(s), "
            f"e.g. {array[bad][0]} at index {int(np.flatnonzero(bad)[0])}"
        )
    return array


def bound_applies(inclusion_rate: float) -> bool:
    """Whether the theorem above covers canaries drawn by coins of this rate: fair coins only."""
    return inclusion_rate == FAIR_COIN_RATE


def unfair_coins_reason(inclusion_rate: float) -> str:
    """Why a plan or release with coins of another rate gets no ε bound (a clause, no final stop)."""
    return (
        f"the members were drawn by independent coins of rate {inclusion_rate:g}, and the one-run ε bound "
        f"holds for fair coins (rate {FAIR_COIN_RATE:g}) only, so these numbers describe leakage and bound no ε"
    )


def _check_delta(delta: float) -> None:
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


# -- the theorem's p-value and its inversion -------------------------------------------------------


def one_run_p_value(*, m: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """P[W >= correct] allowed by (ε, δ)-DP for `guesses` guesses among `m` canaries (the bound above)."""
    if not 0 <= correct <= guesses <= m:
        raise ValueError(f"need 0 <= correct <= guesses <= m, got {correct}, {guesses}, {m}")
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    _check_delta(delta)
    if correct == 0:
        return 1.0
    p = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(
        special.bdtrc(correct - 1, guesses, p)
    )  # P[B > v - 1]: binom.sf without its argument checks (10x faster)
    if delta == 0.0:
        return min(1.0, tail)
    return min(1.0, tail + 2.0 * m * delta * _delta_ratio(guesses, correct, p))


def _binomial_pmf(k: np.ndarray, n: int, p: float) -> np.ndarray:
    """`stats.binom.pmf(k, n, p)` for integers 0 <= k <= n and 0 <= p <= 1, where its argument checks pass: what it
    computes there (its own `_pmf`, clipped to [0, 1]), without them (15x faster on a few hundred k; the same floats,
    tests/audit/test_epsilon.py)."""
    return np.clip(stats.binom._pmf(k, n, p), 0, 1)


def _delta_ratio(guesses: int, correct: int, p: float, *, chunk: int = 2048) -> float:
    """max over i = 1..v of P[v-i <= Binomial(r, p) < v] / i, in chunks of i; exact, since the scan
    stops only once 1/i (the numerator is <= 1) is below the best ratio found."""
    best, total, start = 0.0, 0.0, 1
    while start <= correct:
        stop = min(correct, start + chunk - 1)
        i = np.arange(start, stop + 1)
        cumulative = total + np.cumsum(_binomial_pmf(correct - i, guesses, p))  # P[v-i <= B < v]
        best = max(best, float(np.max(cumulative / i)))
        total = float(cumulative[-1])
        if 1.0 / (stop + 1) <= best:
            break
        start = stop + 1
    return best


def one_run_epsilon(*, m: int, guesses: int, correct: int, delta: float, alpha: float) -> float:
    """The largest ε whose p-value for (guesses, correct) is below `alpha`; 0 if ε = 0 is not rejected
    (bisection: the p-value is non-decreasing in ε)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")

    def rejected(eps: float) -> bool:
        return one_run_p_value(m=m, guesses=guesses, correct=correct, epsilon=eps, delta=delta) < alpha

    if not rejected(0.0):
        return 0.0
    low, high = 0.0, 1.0
    while rejected(high):
        low, high = high, 2.0 * high
    for _ in range(_SEARCH_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if rejected(middle) else (low, middle)
    return low


def guess_grid(m: int) -> tuple[tuple[int, int], ...]:
    """(k₊, k₋) pairs, fixed by m alone: r = round(f·m) guesses for f in GUESS_FRACTIONS, all IN or
    half IN (the top scores) and half OUT (the bottom scores). Duplicates removed, order kept."""
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    grid = []
    for fraction in GUESS_FRACTIONS:
        r = max(1, int(round(fraction * m)))
        for share in IN_SHARES:
            k_in = max(1, int(round(share * r)))
            pair = (k_in, r - k_in)
            if pair not in grid:
                grid.append(pair)
    return tuple(grid)


# -- the audit -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Guesses:
    """k₊ top scores guessed IN, k₋ bottom scores guessed OUT."""

    k_in: int
    k_out: int

    @property
    def total(self) -> int:
        return self.k_in + self.k_out

    def scaled(self, m_from: int, m_to: int) -> Guesses:
        """The same fractions of m at another m (each count kept >= 1 if it was)."""

        def scale(k: int) -> int:
            return 0 if k == 0 else max(1, int(round(k * m_to / m_from)))

        return Guesses(scale(self.k_in), scale(self.k_out))


@dataclass(frozen=True, eq=False)
class RankedGuesses:
    """The canaries ranked once: members among the k highest and non-members among the k lowest
    scores, for every k (ties in an order drawn from `rng`, independent of the coins)."""

    in_from_top: np.ndarray  # [m + 1]
    out_from_bottom: np.ndarray  # [m + 1]

    @classmethod
    def of(cls, member_scores, nonmember_scores, *, rng=None) -> RankedGuesses:
        """Members score `member_scores` (coin IN), non-members `nonmember_scores`; `rng` breaks ties."""
        member = as_score_array(member_scores, name="member_scores")
        nonmember = as_score_array(nonmember_scores, name="nonmember_scores")
        m = member.size + nonmember.size
        scores = np.concatenate([member, nonmember])
        is_in = np.concatenate([np.ones(member.size, dtype=bool), np.zeros(nonmember.size, dtype=bool)])
        order = np.lexsort((np.random.default_rng(rng).random(m), scores))  # ascending, random ties
        ranked_in = is_in[order]
        return cls(np.concatenate([[0], np.cumsum(ranked_in[::-1])]), np.concatenate([[0], np.cumsum(~ranked_in)]))

    @property
    def m(self) -> int:
        return len(self.in_from_top) - 1

    def correct(self, guesses: Guesses) -> int:
        """Right guesses among the top `guesses.k_in` guessed IN and the bottom `guesses.k_out` guessed OUT."""
        if guesses.total > self.m:
            raise ValueError(f"{guesses.total} guesses exceed the {self.m} canaries")
        return int(self.in_from_top[guesses.k_in] + self.out_from_bottom[guesses.k_out])


@dataclass(frozen=True)
class OneRunBound:
    """The bound and the grid point that gave it."""

    epsilon: float  # the lower bound (0 if no grid point rejects ε = 0)
    m: int  # canaries
    guesses_in: int  # k₊ of the best grid point
    guesses_out: int  # k₋
    correct: int  # correct guesses at that point
    grid_size: int  # |grid|: the Bonferroni factor


def one_run_audit(
    member_scores,
    nonmember_scores,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = None,
) -> OneRunBound:
    """The one-run bound on the canaries' scores by coin (IN, OUT; higher = more likely IN); `rng` only breaks ties."""
    _check_delta(delta)
    _check_confidence(confidence)
    ranked = RankedGuesses.of(member_scores, nonmember_scores, rng=rng)
    m = ranked.m
    grid = guess_grid(m)
    alpha_each = (1.0 - confidence) / len(grid)
    best = OneRunBound(0.0, m, 0, 0, 0, len(grid))
    for k_in, k_out in grid:
        correct = ranked.correct(Guesses(k_in, k_out))
        eps = one_run_epsilon(m=m, guesses=k_in + k_out, correct=correct, delta=delta, alpha=alpha_each)
        if eps > best.epsilon:
            best = OneRunBound(eps, m, k_in, k_out, correct, len(grid))
    return best


def epsilon_lower_bound(
    member_scores,
    nonmember_scores,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = None,
) -> float:
    """ε that holds with probability >= `confidence` by the one-run theorem, for canaries drawn by
    independent fair coins and scored by a rule that never saw them (0 on scores without signal)."""
    return one_run_audit(member_scores, nonmember_scores, delta=delta, confidence=confidence, rng=rng).epsilon


def epsilon_ceiling(m: int, *, delta: float = 0.0, confidence: float = 0.95) -> float:
    """What a perfect attack certifies with m canaries, this grid, δ and confidence: no claim at or above it fails."""
    _check_delta(delta)
    _check_confidence(confidence)
    grid = guess_grid(m)
    alpha_each = (1.0 - confidence) / len(grid)
    guesses = sorted({k_in + k_out for k_in, k_out in grid})
    return max(one_run_epsilon(m=m, guesses=r, correct=r, delta=delta, alpha=alpha_each) for r in guesses)


# -- Gaussian differential privacy -----------------------------------------------------------------


def _gdp_log_delta(eps: float, mu: float) -> float:
    """ln δ(ε) for μ-GDP, δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2), in log space."""
    log_first = special.log_ndtr(-eps / mu + mu / 2)
    log_second = eps + special.log_ndtr(-eps / mu - mu / 2)
    with np.errstate(divide="ignore"):  # the terms' difference underflows to 0 far in the tail: ln 0 = -inf is right
        return float(log_first + np.log(-np.expm1(log_second - log_first)))


def gaussian_dp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP is (ε, δ)-DP (Dong, Roth and Su, Corollary 2.13): 0 if δ(0) <= delta, inf at
    delta == 0 < mu (GDP never implies pure DP)."""
    from scipy import optimize

    if not (math.isfinite(mu) and mu >= 0.0):
        raise ValueError(f"mu must be finite and >= 0, got {mu}")
    _check_delta(delta)
    if mu == 0.0:
        return 0.0
    if delta == 0.0:
        return math.inf
    log_delta = math.log(delta)

    def gap(eps: float) -> float:
        return _gdp_log_delta(eps, mu) - log_delta

    if gap(0.0) <= 0.0:
        return 0.0
    # L ~ N(μ²/2, μ²) and δ(ε) <= P(L > ε), so ε = μ²/2 + μ z_(1-δ) brackets the root with ε/μ
    # moderate (where δ(ε)'s two terms do not cancel below double precision)
    upper = mu * mu / 2 + mu * float(special.ndtri(-math.expm1(log_delta)))
    if not gap(upper) <= 0.0:  # not reached for any μ tested (1e-9..60, δ 1e-12..0.5); NaN included
        raise ArithmeticError(f"gaussian_dp_epsilon: no bracket for mu={mu}, delta={delta}")
    return float(optimize.brentq(gap, 0.0, upper, xtol=1e-14, rtol=4 * np.finfo(float).eps))
