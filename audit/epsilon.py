"""Statistically valid lower bounds on the differential-privacy ε of a model.

A membership-inference attack that predicts "member iff score >= t" has a
false-positive rate FPR(t) on non-members and a false-negative rate FNR(t) on
members.  If the training algorithm is (ε, δ)-DP then, for every threshold,

    TPR <= e^ε FPR + δ   and   TNR <= e^ε FNR + δ,

so upper confidence bounds on FPR and FNR turn into a lower confidence bound
on ε (``epsilon_from_rates``).  The bound is valid only if the threshold is
fixed before the counts it is judged on are seen; the two strategies below
guarantee this:

* ``Split``: choose the threshold on one random part of the scores and count
  errors on the other part.
* ``Bonferroni``: a grid of thresholds fixed in advance, with a union bound
  over all of them.

Scores are "higher means more likely a member" throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

MAX_CANDIDATE_THRESHOLDS = 1000


@dataclass(frozen=True)
class Split:
    """Choose the threshold on a random ``frac`` of the data, bound ε on the rest."""

    frac: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.frac, (int, float)) and 0.0 < self.frac < 1.0):
            raise ValueError(f"frac must be in (0, 1), got {self.frac}")


@dataclass(frozen=True)
class Bonferroni:
    """A threshold grid fixed WITHOUT looking at the data; union bound over it."""

    thresholds: tuple[float, ...]

    def __post_init__(self) -> None:
        thresholds = tuple(float(t) for t in np.ravel(self.thresholds))
        if not thresholds:
            raise ValueError(f"thresholds must be non-empty, got {self.thresholds!r}")
        if not all(math.isfinite(t) for t in thresholds):
            raise ValueError(f"thresholds must be finite, got {self.thresholds!r}")
        object.__setattr__(self, "thresholds", thresholds)


# ---------------------------------------------------------------------------
# validation


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


def _check_delta(delta: float) -> None:
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


# ---------------------------------------------------------------------------
# binomial bounds and the (ε, δ) inequality


def _cp_upper(k, n, alpha: float) -> np.ndarray:
    """Vectorised one-sided Clopper–Pearson upper bound (1.0 where k == n)."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    full = k >= n
    upper = special.betaincinv(k + 1.0, np.where(full, 1.0, n - k), 1.0 - alpha)
    return np.where(full, 1.0, upper)


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper (1 - alpha) confidence bound on a binomial proportion.

    Equals ``beta.ppf(1 - alpha, k + 1, n - k)``, i.e. the p with
    P(Binomial(n, p) <= k) = alpha, and 1.0 when k == n.
    """
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    _check_alpha(alpha)
    return float(_cp_upper(k, n, alpha))


def _log_ratio(numerator, denominator) -> np.ndarray:
    """ln(num / den); -inf where num <= 0, +inf where den == 0 < num."""
    numerator = np.asarray(numerator, dtype=float)
    positive = numerator > 0
    with np.errstate(divide="ignore"):
        value = np.log(np.where(positive, numerator, 1.0)) - np.log(denominator)
    return np.where(positive, value, -np.inf)


def _raw_epsilon(fpr_ub, fnr_ub, delta: float) -> np.ndarray:
    """Both (ε, δ) inequalities solved for ε, before flooring at 0."""
    via_tpr = _log_ratio(1.0 - np.asarray(fnr_ub) - delta, fpr_ub)
    via_tnr = _log_ratio(1.0 - np.asarray(fpr_ub) - delta, fnr_ub)
    return np.maximum(via_tpr, via_tnr)


def epsilon_from_rates(*, fpr_ub: float, fnr_ub: float, delta: float) -> float:
    """Smallest ε consistent with (ε, δ)-DP given upper bounds on FPR and FNR.

    (ε, δ)-DP implies TPR <= e^ε FPR + δ and TNR <= e^ε FNR + δ, hence
    ε >= ln((1 - fnr_ub - δ) / fpr_ub) and ε >= ln((1 - fpr_ub - δ) / fnr_ub).
    Returns the larger of the two, floored at 0 (a term whose numerator is
    <= 0 gives 0).  A zero denominator with a positive numerator means no
    finite ε is consistent, and gives ``math.inf``.
    """
    for name, rate in (("fpr_ub", fpr_ub), ("fnr_ub", fnr_ub)):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {rate}")
    _check_delta(delta)
    return max(0.0, float(_raw_epsilon(fpr_ub, fnr_ub, delta)))


# ---------------------------------------------------------------------------
# bounds at given thresholds


def _error_counts(member: np.ndarray, nonmember: np.ndarray, thresholds: np.ndarray):
    """False positives (non-members >= t) and false negatives (members < t)."""
    false_pos = nonmember.size - np.searchsorted(np.sort(nonmember), thresholds, side="left")
    false_neg = np.searchsorted(np.sort(member), thresholds, side="left")
    return false_pos, false_neg


def _raw_bounds(member, nonmember, thresholds, *, delta: float, alpha_each: float):
    """Unfloored ε bound at each threshold, CP bounds on FPR and FNR at alpha_each each."""
    false_pos, false_neg = _error_counts(member, nonmember, thresholds)
    fpr_ub = _cp_upper(false_pos, nonmember.size, alpha_each)
    fnr_ub = _cp_upper(false_neg, member.size, alpha_each)
    return _raw_epsilon(fpr_ub, fnr_ub, delta)


def _candidate_thresholds(scores: np.ndarray, *, max_count: int = MAX_CANDIDATE_THRESHOLDS):
    """At most ``max_count`` evenly spaced order statistics (quantiles) of ``scores``."""
    ordered = np.sort(scores)
    positions = np.linspace(0, ordered.size - 1, num=min(ordered.size, max_count))
    return np.unique(ordered[np.round(positions).astype(int)])


def _shuffle_split(scores: np.ndarray, frac: float, rng: np.random.Generator):
    if scores.size < 2:
        raise ValueError(f"Split needs at least 2 scores per group, got {scores.size}")
    n_select = min(max(int(round(frac * scores.size)), 1), scores.size - 1)
    shuffled = rng.permutation(scores)
    return shuffled[:n_select], shuffled[n_select:]


def _split_bound(member, nonmember, *, delta: float, alpha: float, split: Split, rng):
    member_sel, member_eval = _shuffle_split(member, split.frac, rng)
    nonmember_sel, nonmember_eval = _shuffle_split(nonmember, split.frac, rng)
    candidates = _candidate_thresholds(np.concatenate([member_sel, nonmember_sel]))
    selection = _raw_bounds(member_sel, nonmember_sel, candidates, delta=delta, alpha_each=alpha / 2)
    threshold = candidates[np.argmax(selection)]
    bound = _raw_bounds(
        member_eval, nonmember_eval, np.array([threshold]), delta=delta, alpha_each=alpha / 2
    )
    return max(0.0, float(bound[0]))


def _bonferroni_bound(member, nonmember, *, delta: float, alpha: float, grid: Bonferroni):
    thresholds = np.asarray(grid.thresholds, dtype=float)
    alpha_each = alpha / (2 * thresholds.size)
    bounds = _raw_bounds(member, nonmember, thresholds, delta=delta, alpha_each=alpha_each)
    return max(0.0, float(bounds.max()))


def epsilon_lower_bound(
    member_scores,
    nonmember_scores,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = None,
    strategy: Split | Bonferroni | None = None,
) -> float:
    """Lower confidence bound on ε: with prob >= ``confidence``, ε_true >= result.

    ``strategy`` None means ``Split(0.5)``.  ``rng`` only drives the random
    split.  On scores without membership signal the result is 0.0 with
    probability >= ``confidence``.
    """
    _check_delta(delta)
    _check_confidence(confidence)
    member = as_score_array(member_scores, name="member_scores")
    nonmember = as_score_array(nonmember_scores, name="nonmember_scores")
    strategy = Split() if strategy is None else strategy
    alpha = 1.0 - confidence
    if isinstance(strategy, Split):
        generator = np.random.default_rng(rng)
        return _split_bound(member, nonmember, delta=delta, alpha=alpha, split=strategy, rng=generator)
    if isinstance(strategy, Bonferroni):
        return _bonferroni_bound(member, nonmember, delta=delta, alpha=alpha, grid=strategy)
    raise TypeError(f"strategy must be Split, Bonferroni or None, got {strategy!r}")


# ---------------------------------------------------------------------------
# Gaussian differential privacy


def _gdp_log_delta(eps: float, mu: float) -> float:
    """ln δ(ε) for μ-GDP, δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2), in log space."""
    log_first = special.log_ndtr(-eps / mu + mu / 2)
    log_second = eps + special.log_ndtr(-eps / mu - mu / 2)
    return float(log_first + np.log(-np.expm1(log_second - log_first)))


def gaussian_dp_epsilon(mu: float, delta: float) -> float:
    """ε at which μ-Gaussian DP (Dong, Roth & Su) is (ε, δ)-DP.

    Solves δ(ε) = delta for ε >= 0; 0.0 if δ(0) <= delta (also for mu == 0),
    ``math.inf`` for delta == 0 and mu > 0 (GDP never implies pure DP).
    """
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
    upper = 1.0
    while gap(upper) > 0.0:
        upper *= 2.0
    return float(optimize.brentq(gap, 0.0, upper, xtol=1e-14, rtol=4 * np.finfo(float).eps))
