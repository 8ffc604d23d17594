"""Tests for audit.stats.threshold and audit.stats.pair_test: the certifier for many runs of one
neighbour pair (a threshold chosen on reference runs, two binomial counts on the judged runs).

What is checked, and against what:

* the Clopper–Pearson baseline (Nasr et al. 2023) and the exact test on counts small enough to
  derive by hand, in closed form;
* the exact test's pieces: its statistic grows with TP and falls with FP at every pair of counts,
  the region's probability equals scipy's double sum, the supremum's upper bound is at least
  every value of the curve sampled finely, the p-value grows with the claim, the bound with TP;
* the threshold's choice on hand-sized references, refusals;
* validity and power on exact Gaussian mechanisms (OUT ~ N(0, σ²), IN ~ N(μ, σ²): μ/σ-GDP exactly,
  Dong, Roth and Su), and validity of the ε test on randomised response with a published coin
  (exactly f_{ε,δ}), seeded.
"""

import math
import re
from functools import partial

import numpy as np
import pytest
from scipy import special, stats

from audit.selftest.mechanisms import published_coin_response
from audit.stats import pair_test
from audit.stats.pair_test import Region, Statistic, eps_delta_curve, gaussian_curve
from audit.stats.threshold import (
    baseline_bounds,
    candidate_thresholds,
    choose_threshold,
    clopper_pearson,
    exact_statistic,
    point_epsilon,
    point_mu,
    threshold_audit,
)

ALPHA = 0.05


def centred(pilot, n_in, n_out):
    """A statistic without reach (its region the pilot's alone), centred anywhere."""
    return Statistic.of(pilot, n_in=n_in, n_out=n_out, centre=(0.5, 0.5), reach=math.inf)


# ---------------------------------------------------------------------------
# worked examples


def test_the_baseline_on_a_perfect_attack_of_ten_runs_per_side():
    # TP = 10 of 10, FP = 0 of 10, confidence 0.95: each interval at 0.025 (Bonferroni).
    # Clopper–Pearson at k = n: the lower bound solves P[Binomial(10, x) >= 10] = x^10 = 0.025, so
    # TPR >= 0.025^(1/10) = exp(ln(0.025)/10) = exp(-0.368888) = 0.691503; at k = 0 the upper bound
    # solves P[Binomial(10, x) <= 0] = (1 - x)^10 = 0.025: FPR <= 1 - 0.691503 = 0.308497.
    # μ: Φ⁻¹(0.691503) - Φ⁻¹(0.308497) = 2 Φ⁻¹(0.691503) = 2 (0.5 + 0.000041/φ(0.5) = 0.500115) = 1.00023
    # (Φ(0.5) = 0.691462, φ(0.5) = 0.352065).
    # ε at δ = 0: ln(0.691503/0.308497) = ln 2.241522 = 0.807155; at δ = 0.01 both lines give
    # ln((0.691503 - 0.01)/0.308497) = ln 2.209106 = 0.792588.
    low = 0.025**0.1
    assert clopper_pearson(10, 10, 0.025) == pytest.approx((low, 1.0))
    assert clopper_pearson(0, 10, 0.025) == pytest.approx((0.0, 1 - low))
    mu, eps = baseline_bounds(tp=10, n_in=10, fp=0, n_out=10, delta=0.0, confidence=0.95)
    assert mu == pytest.approx(1.00023, abs=1e-5)
    assert eps == pytest.approx(0.807155, abs=1e-6)
    assert baseline_bounds(tp=10, n_in=10, fp=0, n_out=10, delta=0.01, confidence=0.95)[1] == pytest.approx(
        0.792588, abs=1e-6
    )


def test_point_bounds_by_hand():
    # (FPR, TPR) = (0.1, 0.5): μ = 0 - Φ⁻¹(0.1) = 1.281552; ε at δ = 0: max(ln(0.5/0.1), ln(0.9/0.5))
    # = ln 5 = 1.609438; at δ = 0.1: max(ln(0.4/0.1), ln(0.8/0.5)) = ln 4.
    assert point_mu(0.1, 0.5) == pytest.approx(1.281552, abs=1e-6)
    assert point_epsilon(0.1, 0.5, 0.0) == pytest.approx(math.log(5))
    assert point_epsilon(0.1, 0.5, 0.1) == pytest.approx(math.log(4))
    assert point_mu(0.6, 0.4) == 0.0 and point_epsilon(0.6, 0.4, 0.0) == 0.0  # below the diagonal: nothing
    assert point_epsilon(0.0, 0.5, 0.0) == math.inf  # no ε-DP mechanism has TPR > 0 at FPR 0


def test_the_exact_test_on_a_perfect_attack_in_closed_form():
    # TP = n, FP = 0 is the statistic's unique maximum (every other pair has fewer TP or more FP), so
    # the rejection region is that pair alone and P_{f, T(f)} = ((1 - f) T(f))^n.
    # f_{ε,0}: below the kink f* = 1/(1 + e^ε), (1 - f) e^ε f grows (f < 1/2); above it, with x = 1 - f,
    # x - e^-ε x² grows while x < e^ε/2, which holds for x <= p = e^ε/(1 + e^ε). So the supremum is at
    # f*, where 1 - f* = T(f*) = p: the p-value is p^(2n).
    # G_μ: with u = Φ⁻¹(f), Φ(-u) Φ(u + μ) is log-concave and symmetric about u = -μ/2: Φ(μ/2)^(2n).
    # n = 1, ε = 0: 1/4. n = 10, ε = 1: (e/(1 + e))^20 = 0.731059^20 = 0.00190127.
    # The largest rejected at α = 0.05, n = 10: a = 0.05^(1/20) = exp(-0.149787) = 0.860892, so
    # ε = ln(a/(1 - a)) = ln 6.188695 = 1.822716 and μ = 2 Φ⁻¹(a) = 2 · 1.084334 = 2.168668.
    one = centred(gaussian_curve(1.0), 1, 1)
    assert pair_test.p_value(eps_delta_curve(0.0, 0.0), tp=1, fp=0, statistic=one) == pytest.approx(0.25, abs=1e-6)
    ten = centred(gaussian_curve(1.0), 10, 10)
    p = pair_test.p_value(eps_delta_curve(1.0, 0.0), tp=10, fp=0, statistic=ten)
    assert 0.00190127 - 1e-8 <= p <= 0.00190127 + 1e-6  # an upper bound, within its tolerance
    assert pair_test.p_value(gaussian_curve(2.0), tp=10, fp=0, statistic=ten) == pytest.approx(
        stats.norm.cdf(1.0) ** 20, abs=1e-6
    )
    eps = pair_test.largest_rejected(lambda e: eps_delta_curve(e, 0.0), tp=10, fp=0, statistic=ten, alpha=ALPHA)
    mu = pair_test.largest_rejected(gaussian_curve, tp=10, fp=0, statistic=ten, alpha=ALPHA)
    assert 1.822716 - 5e-4 <= eps <= 1.822716 + 1e-6  # the bisection stops within 5e-4 below
    assert 2.168668 - 5e-4 <= mu <= 2.168668 + 1e-6
    # twice what the baseline certifies from the same counts (0.807 and 1.000, above)
    assert eps > 2 * 0.807155 and mu > 2 * 1.00023


# ---------------------------------------------------------------------------
# the exact test's pieces


@pytest.mark.parametrize("reach", [math.inf, 2.0])
def test_the_statistic_grows_with_tp_and_falls_with_fp(reach):
    n_in, n_out = 20, 15
    statistic = Statistic.of(gaussian_curve(1.0), n_in=n_in, n_out=n_out, centre=(0.3, 0.6), reach=reach)
    values = np.array([[statistic.value(tp, fp) for fp in range(n_out + 1)] for tp in range(n_in + 1)])
    assert np.all(np.diff(values, axis=0) >= 0) and np.all(np.diff(values, axis=1) <= 0)
    # and its region at every observed value is exactly the pairs at least as large
    for tp, fp in [(12, 4), (3, 9), (20, 0)]:
        least = statistic.least_tp(values[tp, fp])
        inside = np.arange(n_in + 1)[:, None] >= least[None, :]
        assert np.array_equal(inside, values >= values[tp, fp] - 1e-9)


def test_the_regions_probability_is_the_double_sum():
    n_in, n_out = 30, 40
    statistic = Statistic.of(gaussian_curve(0.8), n_in=n_in, n_out=n_out, centre=(0.3, 0.6), reach=3.0)
    least = statistic.least_tp(statistic.value(20, 10))
    f, t = np.array([0.05, 0.3, 0.7]), np.array([0.2, 0.55, 0.9])
    got = Region.of(n_in, least).probability(f, t)
    fp, tp = np.arange(n_out + 1), np.arange(n_in + 1)
    inside = tp[:, None] >= least[None, :]
    want = [
        np.sum(stats.binom.pmf(tp, n_in, b)[:, None] * stats.binom.pmf(fp, n_out, a)[None, :] * inside)
        for a, b in zip(f, t)
    ]
    assert got == pytest.approx(want, abs=1e-12)


def test_the_supremums_upper_bound_is_above_the_curve_sampled_finely():
    n_in, n_out = 60, 80
    statistic = Statistic.of(gaussian_curve(1.0), n_in=n_in, n_out=n_out, centre=(0.3, 0.6), reach=5.0)
    region = Region.of(n_in, statistic.least_tp(statistic.value(40, 20)))
    f = special.ndtr(np.linspace(-8, 8, 4001))
    for curve in (gaussian_curve(0.7), eps_delta_curve(0.5, 0.05)):
        sampled = float(np.max(region.probability(f, curve(f))))
        lower, upper = pair_test.supremum(curve, region, tolerance=1e-5)
        assert sampled <= upper and upper - lower <= 1e-5


def test_the_p_value_grows_with_the_claim_and_the_bound_with_tp():
    statistic = centred(gaussian_curve(1.0), 50, 50)
    p = [pair_test.p_value(gaussian_curve(mu), tp=35, fp=15, statistic=statistic) for mu in (0.5, 1.0, 1.5)]
    assert p[0] <= p[1] <= p[2]
    bounds = [
        pair_test.largest_rejected(gaussian_curve, tp=tp, fp=15, statistic=statistic, alpha=ALPHA)
        for tp in (25, 30, 35, 40, 45)
    ]
    assert bounds == sorted(bounds) and bounds[0] < bounds[-1]
    bounds = [
        pair_test.largest_rejected(gaussian_curve, tp=40, fp=fp, statistic=statistic, alpha=ALPHA)
        for fp in (5, 10, 15, 20)
    ]
    assert bounds == sorted(bounds, reverse=True) and bounds[0] > bounds[-1]


# ---------------------------------------------------------------------------
# the choice, refusals


def test_candidate_thresholds_by_hand():
    # n = 8: fractions 2^(-j/2), j = 1..7, and one minus them, times 8 and rounded: 6, 4, 3, 2, 1, 1, 1
    # and 2, 4, 5, 6, 7, 7, 7: the counts 1..7, so every score but the lowest (8 - count = 7..1).
    assert candidate_thresholds(np.arange(8.0)).tolist() == [1, 2, 3, 4, 5, 6, 7]


def test_perfectly_separated_references_put_the_threshold_between_the_sides():
    # IN scores all 1, OUT all 0: the pooled grid holds 1, where the judged counts are TP = 100 of
    # 100 and FP = 0 of 100; the baseline's μ there is 2 Φ⁻¹(0.025^(1/100)) > 0, and the exact one more
    audit = threshold_audit(np.ones(50), np.zeros(50), np.ones(100), np.zeros(100), delta=0.0)
    assert (audit.sign, audit.threshold, audit.tp, audit.fp) == (1, 1.0, 100, 0)
    assert audit.mu_lower_baseline == pytest.approx(2 * special.ndtri(0.025**0.01))
    assert audit.mu_lower > audit.mu_lower_baseline


def test_the_direction_is_chosen_on_the_references():
    rng = np.random.default_rng(0)
    ref_in, ref_out = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)
    assert choose_threshold(ref_in, ref_out, n_in=300, n_out=300).sign == 1
    assert choose_threshold(-ref_in, -ref_out, n_in=300, n_out=300).sign == -1


@pytest.mark.parametrize(
    "change, match",
    [
        ({"judged_in": []}, "judged_in must be non-empty"),
        ({"reference_out": [0.0, math.nan]}, "reference_out must be finite"),
        ({"confidence": 1.0}, "confidence must be in"),
        ({"delta": 1.0}, "delta must be in"),
        ({"objective": "auc"}, "objective must be one of"),
    ],
)
def test_refusals(change, match):
    args = {"reference_in": [1.0, 2.0], "reference_out": [0.0, 1.0], "judged_in": [1.0], "judged_out": [0.0]}
    kwargs = {"delta": 0.0}
    for key, value in change.items():
        (args if key in args else kwargs)[key] = value
    with pytest.raises(ValueError, match=re.escape(match)) as error:
        threshold_audit(*args.values(), **kwargs)
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------------------
# validity and power on exact Gaussian mechanisms


def alarms(mu, *, references, judged, repetitions, sigma=1.0, claim=None):
    """How often the exact test rejects μ-GDP at `claim` (default: the true μ) at level 0.05, scores
    OUT ~ N(0, σ²) and IN ~ N(μ, σ²) (exactly μ/σ-GDP), the threshold chosen on `references` per side."""
    count = 0
    for seed in range(repetitions):
        rng = np.random.default_rng(seed)
        ref_in, ref_out = rng.normal(mu, sigma, references), rng.normal(0.0, sigma, references)
        judged_in, judged_out = rng.normal(mu, sigma, judged), rng.normal(0.0, sigma, judged)
        choice = choose_threshold(ref_in, ref_out, n_in=judged, n_out=judged)
        tp = int(np.sum(choice.sign * judged_in >= choice.threshold))
        fp = int(np.sum(choice.sign * judged_out >= choice.threshold))
        statistic = exact_statistic(
            gaussian_curve, choice, n_in=judged, n_out=judged, reference_sizes=(references, references), confidence=0.95
        )
        count += pair_test.rejects(gaussian_curve(claim or mu), tp=tp, fp=fp, statistic=statistic, alpha=ALPHA)
    return count


@pytest.mark.parametrize("mu, references, judged", [(0.5, 500, 1000), (1.0, 200, 500)])
def test_false_alarms_at_the_true_mu_are_not_above_five_percent(mu, references, judged):
    # The test is exact, so at the true μ its alarm rate is at most 5% and, the supremum being
    # nearly flat along the curve, close to it: the check is the self-test's, a one-sided exact
    # binomial test of "rate <= 5%" at 5% (measured: 13 and 8 alarms of 200).
    count = alarms(mu, references=references, judged=judged, repetitions=200)
    assert stats.binomtest(count, 200, ALPHA, alternative="greater").pvalue > 0.05, count


def test_false_alarms_of_the_epsilon_test_on_a_mechanism_whose_curve_is_f_eps_delta():
    # randomised response at ε = 1 that publishes the coin with probability δ = 0.01: its trade-off
    # curve is f_{ε,δ} itself (audit.selftest.mechanisms.published_coin_response), so the claim
    # (1, 0.01) is exactly met; the threshold chosen for ε on 500 references, 1,000 judged per side
    # (measured: 7 alarms of 200)
    family = partial(eps_delta_curve, delta=0.01)
    count = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        draw = [
            published_coin_response(np.full(n, inside), 1.0, rng, delta=0.01)
            for n, inside in ((500, True), (500, False), (1000, True), (1000, False))
        ]
        choice = choose_threshold(draw[0], draw[1], n_in=1000, n_out=1000, delta=0.01, objective="epsilon")
        tp = int(np.sum(choice.sign * draw[2] >= choice.threshold))
        fp = int(np.sum(choice.sign * draw[3] >= choice.threshold))
        statistic = exact_statistic(family, choice, n_in=1000, n_out=1000, reference_sizes=(500, 500), confidence=0.95)
        count += pair_test.rejects(family(1.0), tp=tp, fp=fp, statistic=statistic, alpha=ALPHA)
    assert stats.binomtest(count, 200, ALPHA, alternative="greater").pvalue > 0.05, count


def test_half_the_noise_is_detected_every_time():
    # σ = 1/2 doubles the true μ to 1.0; the claim stays 0.5: rejected in each of 20 repetitions
    assert alarms(0.5, references=500, judged=1000, repetitions=20, sigma=0.5, claim=0.5) == 20
