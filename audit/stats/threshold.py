"""A certifier for many runs of one worst-case neighbour pair: scores in, bounds on μ and ε out.

The reference runs only choose the score's direction and threshold (`predicted_choice`); the judged runs are thresholded
once: TP of n_in and FP of n_out, binomials of the test's TPR t and FPR f, which a mechanism meeting the claim keeps
below its curve (μ-GDP: Dong, Roth and Su 2019; (ε, δ)-DP: the region of Kairouz, Oh and Viswanath 2015). Two bounds,
each at `confidence`: the exact test (`audit.stats.pair_test`, up to 5e-4 below the largest rejected) and Nasr et al.
2023's baseline (Clopper–Pearson on each rate at (1 - confidence)/2). Both are valid: the choices depend on the
references only (figures: docs/results/threshold.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy import special, stats

from audit.stats import pair_test
from audit.stats.epsilon import as_score_array

OBJECTIVES = ("mu", "epsilon")
#: the least FP count, and least count of IN scores below it, that a threshold may leave in the references
#: and expect in the judged runs (`choose_threshold`)
MIN_COUNT = 10.0
#: the pilot statistic's reach, in standard deviations of the judged point about the reference point
REACH_SDS = 4.0


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """(lower, upper): one-sided Clopper–Pearson bounds on a binomial rate from k of n, each holding with probability >=
    1 - alpha: Beta(alpha; k, n - k + 1) (0 at k = 0) and Beta(1 - alpha; k + 1, n - k) (1 at k = n)."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got {k}, {n}")
    lower = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))
    return lower, upper


def point_mu(fpr: float, tpr: float) -> float:
    """The least μ whose Gaussian curve passes above (fpr, tpr): max(0, Φ⁻¹(tpr) - Φ⁻¹(fpr))."""
    return max(0.0, float(special.ndtri(tpr) - special.ndtri(fpr)))


def point_epsilon(fpr: float, tpr: float, delta: float) -> float:
    """The least ε whose (ε, δ) region holds (fpr, tpr): max(0, ln((tpr - δ)/fpr), ln((1 - δ - fpr)/(1 - tpr))),
    inf where no ε does (fpr = 0 < tpr - δ, or tpr = 1 > fpr + δ)."""
    values = [0.0]
    if tpr > delta:  # TPR <= e^ε FPR + δ
        values.append(math.inf if fpr == 0.0 else math.log((tpr - delta) / fpr))
    if fpr < 1.0 - delta:  # TPR <= 1 - e^-ε (1 - δ - FPR)
        values.append(math.inf if tpr == 1.0 else math.log((1.0 - delta - fpr) / (1.0 - tpr)))
    return max(values)


@dataclass(frozen=True)
class Choice:
    """What the reference runs chose: guess IN where sign · score >= threshold."""

    sign: int  # +1: higher scores are IN; -1: lower ones
    threshold: float
    fpr: float  # the references' FPR and TPR there
    tpr: float


def _rates(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """The fraction of `scores` at or above each threshold."""
    ordered = np.sort(scores)
    return (ordered.size - np.searchsorted(ordered, thresholds, side="left")) / ordered.size


def candidate_thresholds(scores: np.ndarray) -> np.ndarray:
    """The pooled reference scores at or above which a fraction 2^(-j/2) or 1 - 2^(-j/2) of them lie
    (j = 1, 2, ..., while that is one score or more): a grid fixed by their number, about 4 log2 n."""
    n = scores.size
    ordered = np.sort(scores)
    fractions = 2.0 ** (-np.arange(1, 2 * int(math.log2(n)) + 2) / 2)
    counts = np.unique(np.round(np.concatenate([fractions, 1 - fractions]) * n).astype(int))
    counts = counts[(counts >= 1) & (counts <= n - 1)]
    return np.unique(ordered[n - counts])


def binormal_tpr(fpr: np.ndarray, tpr: np.ndarray, *, equal_variance: bool) -> np.ndarray:
    """The TPRs smoothed by a binormal fit Φ⁻¹(tpr) = a + b Φ⁻¹(fpr), least squares over the points
    (rates clipped to [1e-6, 1 - 1e-6]): with `equal_variance` b = 1 and a is the mean of
    Φ⁻¹(tpr) - Φ⁻¹(fpr), the Gaussian curve G_a, which every Gaussian mechanism follows."""
    u, v = special.ndtri(np.clip(fpr, 1e-6, 1 - 1e-6)), special.ndtri(np.clip(tpr, 1e-6, 1 - 1e-6))
    if equal_variance:
        return special.ndtr(u + np.mean(v - u))
    if u.size < 2 or np.ptp(u) == 0.0:
        return np.asarray(tpr, dtype=float)
    b, a = np.polyfit(u, v, 1)
    return special.ndtr(a + b * u)


def _predicted(fpr, tpr, *, n_in: int, n_out: int, confidence: float, delta: float, objective: str):
    """What the judged runs are expected to certify at a point (fpr, tpr): the plug-in value less
    Φ⁻¹(confidence) standard errors of the judged counts (delta method for μ; for ε the point moved
    by as many standard errors of each rate)."""
    q = float(special.ndtri(confidence))
    f, t = np.clip(fpr, 0.5 / n_out, 1 - 0.5 / n_out), np.clip(tpr, 0.5 / n_in, 1 - 0.5 / n_in)
    var_f, var_t = f * (1 - f) / n_out, t * (1 - t) / n_in
    if objective == "mu":
        u, v = special.ndtri(f), special.ndtri(t)
        return v - u - q * np.sqrt(var_f / stats.norm.pdf(u) ** 2 + var_t / stats.norm.pdf(v) ** 2)
    f_high, t_low = np.minimum(1.0, f + q * np.sqrt(var_f)), np.maximum(0.0, t - q * np.sqrt(var_t))
    return np.array([point_epsilon(a, b, delta) for a, b in zip(f_high, t_low)])


def choose_threshold(reference_in, reference_out, **options) -> Choice:
    """The threshold `predicted_choice` chooses (its options), without its prediction."""
    return predicted_choice(reference_in, reference_out, **options)[0]


def predicted_choice(
    reference_in,
    reference_out,
    *,
    n_in: int,
    n_out: int,
    confidence: float = 0.95,
    delta: float = 0.0,
    objective: str = "mu",
    min_count: float = MIN_COUNT,
) -> tuple[Choice, float]:
    """The direction and threshold (of `candidate_thresholds`, either sign) whose references predict the largest bound
    on `objective` at the judged counts (`_predicted`, TPR smoothed by `binormal_tpr`), among those leaving at least
    `min_count` OUT scores above and IN scores below in references and judged runs (else every candidate). Ties go to
    sign +1 and the lowest threshold. Returned with its predicted bound (-inf: no candidate)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    ref_in = as_score_array(reference_in, name="reference_in")
    ref_out = as_score_array(reference_out, name="reference_out")
    best, best_value = Choice(1, -math.inf, 1.0, 1.0), -math.inf
    for sign in (1, -1):
        candidates = candidate_thresholds(sign * np.concatenate([ref_in, ref_out]))
        if candidates.size == 0:
            continue
        fpr, tpr = _rates(sign * ref_out, candidates), _rates(sign * ref_in, candidates)
        smaller_in, smaller_out = min(n_in, ref_in.size), min(n_out, ref_out.size)
        allowed = (fpr * smaller_out >= min_count) & ((1.0 - tpr) * smaller_in >= min_count)
        allowed = allowed if allowed.any() else np.ones_like(allowed)
        smooth = np.full(fpr.shape, np.nan)
        smooth[allowed] = binormal_tpr(fpr[allowed], tpr[allowed], equal_variance=objective == "mu")
        value = _predicted(fpr, smooth, n_in=n_in, n_out=n_out, confidence=confidence, delta=delta, objective=objective)
        value = np.where(allowed, value, -np.inf)
        i = int(np.argmax(value))
        if value[i] > best_value:
            best, best_value = Choice(sign, float(candidates[i]), float(fpr[i]), float(tpr[i])), float(value[i])
    return best, best_value


@dataclass(frozen=True)
class ThresholdAudit:
    """One threshold's counts on the judged runs and what they certify, each bound at `confidence`."""

    sign: int  # +1: higher scores are IN
    threshold: float  # guess IN where sign · score >= threshold
    tp: int  # judged IN scores guessed IN, of n_in
    n_in: int
    fp: int  # judged OUT scores guessed IN, of n_out
    n_out: int
    confidence: float
    delta: float
    objective: str  # what the threshold was chosen for (`OBJECTIVES`)
    mu_lower: float  # the exact test's largest rejected μ (0: none)
    epsilon_lower: float  # the exact test's largest rejected ε at delta (0: none)
    mu_lower_baseline: float  # Clopper–Pearson at (1 - confidence)/2 each, plugged into G_μ
    epsilon_lower_baseline: float  # the same, plugged into the (ε, δ) region

    @property
    def fpr(self) -> float:
        return self.fp / self.n_out

    @property
    def tpr(self) -> float:
        return self.tp / self.n_in


def baseline_bounds(*, tp: int, n_in: int, fp: int, n_out: int, delta: float, confidence: float) -> tuple[float, float]:
    """(μ, ε at δ) of Nasr et al.'s baseline: the curve through the Clopper–Pearson lower bound on the
    TPR and upper bound on the FPR, each at level (1 - confidence)/2."""
    split = (1.0 - confidence) / 2.0
    tpr_low, fpr_high = clopper_pearson(tp, n_in, split)[0], clopper_pearson(fp, n_out, split)[1]
    return point_mu(fpr_high, tpr_low), point_epsilon(fpr_high, tpr_low, delta)


def exact_statistic(
    family, choice: Choice, *, n_in: int, n_out: int, reference_sizes: tuple[int, int], confidence: float
) -> pair_test.Statistic:
    """The exact test's statistic for `family`, fixed by the references alone: its pilot passes
    Φ⁻¹(confidence) · s standardised units below the references' point and its reach is `REACH_SDS` · s,
    s = √(1 + the larger judged/reference size ratio), the judged point's spread about it."""
    spread = math.sqrt(1.0 + max(n_in / reference_sizes[0], n_out / reference_sizes[1]))
    distance = float(special.ndtri(confidence)) * spread
    pilot = pair_test.pilot_parameter(family, tpr=choice.tpr, fpr=choice.fpr, n_in=n_in, n_out=n_out, distance=distance)
    centre = (choice.fpr, choice.tpr)
    return pair_test.Statistic.of(family(pilot), n_in=n_in, n_out=n_out, centre=centre, reach=REACH_SDS * spread)


def threshold_audit(
    reference_in,
    reference_out,
    judged_in,
    judged_out,
    *,
    delta: float,
    confidence: float = 0.95,
    objective: str = "mu",
    min_count: float = MIN_COUNT,
) -> ThresholdAudit:
    """Choose on the references (for `objective`), count on the judged runs, and bound μ and ε at
    `delta` both ways; ValueError (one line) on an empty or non-finite score array."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    ref_in = as_score_array(reference_in, name="reference_in")
    ref_out = as_score_array(reference_out, name="reference_out")
    judged_in = as_score_array(judged_in, name="judged_in")
    judged_out = as_score_array(judged_out, name="judged_out")
    n_in, n_out = judged_in.size, judged_out.size
    choice = choose_threshold(
        ref_in,
        ref_out,
        n_in=n_in,
        n_out=n_out,
        confidence=confidence,
        delta=delta,
        objective=objective,
        min_count=min_count,
    )
    tp = int(np.sum(choice.sign * judged_in >= choice.threshold))
    fp = int(np.sum(choice.sign * judged_out >= choice.threshold))
    sizes = (ref_in.size, ref_out.size)

    def exact(family) -> float:
        statistic = exact_statistic(
            family, choice, n_in=n_in, n_out=n_out, reference_sizes=sizes, confidence=confidence
        )
        return pair_test.largest_rejected(family, tp=tp, fp=fp, statistic=statistic, alpha=1.0 - confidence)

    mu_base, eps_base = baseline_bounds(tp=tp, n_in=n_in, fp=fp, n_out=n_out, delta=delta, confidence=confidence)
    return ThresholdAudit(
        sign=choice.sign,
        threshold=choice.threshold,
        tp=tp,
        n_in=n_in,
        fp=fp,
        n_out=n_out,
        confidence=confidence,
        delta=delta,
        objective=objective,
        mu_lower=exact(pair_test.gaussian_curve),
        epsilon_lower=exact(partial(pair_test.eps_delta_curve, delta=delta)),
        mu_lower_baseline=mu_base,
        epsilon_lower_baseline=eps_base,
    )
