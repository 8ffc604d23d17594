"""Tests for audit.epsilon: exact bounds, validity under the null, power, GDP."""

import dataclasses
import math
import re

import numpy as np
import pytest
from scipy.stats import binom, norm

from audit.epsilon import (
    Bonferroni,
    Split,
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    gaussian_dp_epsilon,
)

N_TRIALS = 200
# If a bound is valid at 95% confidence, each trial is a failure with prob <= 0.05.
# The spec requires 0.0 in >= 95% of trials, i.e. at most 10 of 200 failures.
MAX_NULL_FAILURES = 10


# ---------------------------------------------------------------------------
# Clopper–Pearson


@pytest.mark.parametrize("n, alpha", [(1, 0.05), (10, 0.05), (500, 0.025), (1000, 1e-4)])
def test_clopper_pearson_k_zero_closed_form(n, alpha):
    # k=0: the bound is Beta(1, n).ppf(1 - alpha), and Beta(1, n) has CDF 1 - (1 - x)^n,
    # so 1 - (1 - x)^n = 1 - alpha  <=>  x = 1 - alpha^(1/n).
    assert clopper_pearson_upper(0, n, alpha) == pytest.approx(1 - alpha ** (1 / n), rel=1e-12)


def test_clopper_pearson_k_equals_n_is_one():
    assert clopper_pearson_upper(7, 7, 0.05) == 1.0
    assert clopper_pearson_upper(0, 0, 0.05) == 1.0  # no data, no information


@pytest.mark.parametrize("k, n, alpha", [(3, 20, 0.05), (50, 200, 0.01), (999, 1000, 0.1)])
def test_clopper_pearson_defining_property(k, n, alpha):
    # The upper bound p solves P(Binomial(n, p) <= k) = alpha.
    upper = clopper_pearson_upper(k, n, alpha)
    assert k / n < upper < 1.0
    assert binom.cdf(k, n, upper) == pytest.approx(alpha, rel=1e-9)


def test_clopper_pearson_validation():
    with pytest.raises(ValueError, match=re.escape("k=5, n=3")):
        clopper_pearson_upper(5, 3, 0.05)
    with pytest.raises(ValueError, match=re.escape("got 1.0")):
        clopper_pearson_upper(1, 3, 1.0)


# ---------------------------------------------------------------------------
# epsilon_from_rates


def test_epsilon_from_rates_hand_cases():
    # fpr 0.1, fnr 0.2, delta 0: ln(0.8 / 0.1) = ln 8 vs ln(0.9 / 0.2) = ln 4.5 -> ln 8
    assert epsilon_from_rates(fpr_ub=0.1, fnr_ub=0.2, delta=0.0) == pytest.approx(math.log(8))
    # delta 0.1: ln(0.7 / 0.1) = ln 7 vs ln(0.8 / 0.2) = ln 4 -> ln 7
    assert epsilon_from_rates(fpr_ub=0.1, fnr_ub=0.2, delta=0.1) == pytest.approx(math.log(7))
    # The TNR inequality can win: ln(0.95 / 0.5) = ln 1.9 vs ln(0.5 / 0.05) = ln 10 -> ln 10
    assert epsilon_from_rates(fpr_ub=0.5, fnr_ub=0.05, delta=0.0) == pytest.approx(math.log(10))
    # fpr + fnr = 1: ln(0.5 / 0.5) = 0 -> 0
    assert epsilon_from_rates(fpr_ub=0.5, fnr_ub=0.5, delta=0.0) == 0.0
    # numerators 1 - 0.6 - 0.5 < 0 -> 0 (not NaN)
    assert epsilon_from_rates(fpr_ub=0.6, fnr_ub=0.6, delta=0.5) == 0.0
    # fpr + fnr > 1: both logs negative -> floored at 0
    assert epsilon_from_rates(fpr_ub=0.7, fnr_ub=0.6, delta=0.0) == 0.0
    # zero denominator with a positive numerator: no finite epsilon fits
    assert epsilon_from_rates(fpr_ub=0.0, fnr_ub=0.2, delta=0.0) == math.inf


def test_epsilon_from_rates_validation():
    with pytest.raises(ValueError, match=re.escape("fpr_ub must be in [0, 1], got 1.5")):
        epsilon_from_rates(fpr_ub=1.5, fnr_ub=0.1, delta=0.0)
    with pytest.raises(ValueError, match=re.escape("delta must be in [0, 1), got 1.0")):
        epsilon_from_rates(fpr_ub=0.1, fnr_ub=0.1, delta=1.0)


# ---------------------------------------------------------------------------
# exact values of epsilon_lower_bound on perfectly separated data


def test_split_bound_exact_on_separated_data():
    # 1000 members at 1, 1000 non-members at 0, Split(0.5): every candidate
    # threshold in (0, 1] is perfect; the evaluation part has 500 of each with
    # FP = FN = 0, so both CP bounds (alpha/2 = 0.025, n = 500) equal
    # u = 1 - 0.025^(1/500), and eps = ln((1 - u - delta) / u).
    members, nonmembers = np.ones(1000), np.zeros(1000)
    u = 1 - 0.025 ** (1 / 500)
    assert epsilon_lower_bound(members, nonmembers, rng=0) == pytest.approx(math.log((1 - u) / u), rel=1e-12)
    bound = epsilon_lower_bound(members, nonmembers, delta=0.1, rng=0)
    assert bound == pytest.approx(math.log((1 - u - 0.1) / u), rel=1e-12)


def test_bonferroni_bound_exact_and_pays_for_grid_size():
    # Same data, all 1000 + 1000 scores used.  One threshold (k=1): alpha/(2k) = 0.025.
    # Two thresholds (0.5, 2.0), k=2: alpha/4 = 0.0125 for each bound; t=2.0 flags
    # nobody (FNR bound 1 -> 0), so the max comes from t=0.5 with the smaller alpha.
    members, nonmembers = np.ones(1000), np.zeros(1000)
    u1 = 1 - 0.025 ** (1 / 1000)
    u2 = 1 - 0.0125 ** (1 / 1000)
    one = epsilon_lower_bound(members, nonmembers, strategy=Bonferroni((0.5,)))
    two = epsilon_lower_bound(members, nonmembers, strategy=Bonferroni((0.5, 2.0)))
    assert one == pytest.approx(math.log((1 - u1) / u1), rel=1e-12)
    assert two == pytest.approx(math.log((1 - u2) / u2), rel=1e-12)
    assert two < one


def test_reversed_scores_give_zero_for_threshold_rule():
    # Members all score below non-members: "member iff score >= t" has TPR <= FPR at every
    # threshold, i.e. no evidence against eps = 0 from this direction.  Both the
    # TPR- and the TNR-inequality would need FPR + FNR < 1 - delta; here FPR + FNR >= 1.
    members, nonmembers = np.zeros(500), np.ones(500)
    assert epsilon_lower_bound(members, nonmembers, rng=0) == 0.0
    assert epsilon_lower_bound(members, nonmembers, strategy=Bonferroni((0.5,))) == 0.0


def test_split_reproducible_and_frac_respected():
    gen = np.random.default_rng(1)
    members, nonmembers = gen.normal(1.5, 1, 2000), gen.normal(0, 1, 2000)
    assert epsilon_lower_bound(members, nonmembers, rng=5) == epsilon_lower_bound(members, nonmembers, rng=5)
    for frac in (0.2, 0.5, 0.8):
        assert epsilon_lower_bound(members, nonmembers, rng=5, strategy=Split(frac)) > 0.0


# ---------------------------------------------------------------------------
# null validity: no membership signal -> exactly 0.0 with prob >= confidence


def _null_trials(sample, strategy=None):
    zeros = 0
    for seed in range(N_TRIALS):
        gen = np.random.default_rng(seed)
        members, nonmembers = sample(gen), sample(gen)
        zeros += epsilon_lower_bound(members, nonmembers, rng=gen, strategy=strategy) == 0.0
    return zeros


NULL_SAMPLERS = {
    "gaussian": lambda gen: gen.normal(0, 1, 500),
    "discrete_ties": lambda gen: gen.integers(0, 4, 500).astype(float),  # 4 values, heavy ties
}


@pytest.mark.parametrize("name", sorted(NULL_SAMPLERS))
def test_null_validity_split(name):
    zeros = _null_trials(NULL_SAMPLERS[name])
    print(f"Split null ({name}): 0.0 in {zeros}/{N_TRIALS} trials")
    assert zeros >= N_TRIALS - MAX_NULL_FAILURES, f"0.0 in only {zeros}/{N_TRIALS}"


@pytest.mark.parametrize("name", sorted(NULL_SAMPLERS))
def test_null_validity_bonferroni(name):
    grid = Bonferroni(tuple(np.linspace(-2.0, 3.0, 11)))  # fixed before seeing any data
    zeros = _null_trials(NULL_SAMPLERS[name], strategy=grid)
    print(f"Bonferroni null ({name}): 0.0 in {zeros}/{N_TRIALS} trials")
    assert zeros >= N_TRIALS - MAX_NULL_FAILURES, f"0.0 in only {zeros}/{N_TRIALS}"


@pytest.mark.parametrize("strategy", [None, Bonferroni((0.5,))], ids=["split", "bonferroni"])
def test_coverage_with_known_true_epsilon(strategy):
    # Binary scores: members 1 w.p. 0.6, non-members 1 w.p. 0.4.  This is randomized
    # response, exactly (ln 1.5, 0)-DP, and its only informative threshold attains
    # ln 1.5 (TPR/FPR = TNR/FNR = 0.6/0.4), so the bound is tight and a 95% bound
    # may exceed ln 1.5 in at most ~5% of trials.  With 200 trials at rate 0.05,
    # more than 20 exceedances has probability < 0.002.
    true_eps = math.log(1.5)
    exceed, positive = 0, 0
    for seed in range(N_TRIALS):
        gen = np.random.default_rng(seed)
        members = (gen.random(2000) < 0.6).astype(float)
        nonmembers = (gen.random(2000) < 0.4).astype(float)
        bound = epsilon_lower_bound(members, nonmembers, rng=gen, strategy=strategy)
        exceed += bound > true_eps
        positive += bound > 0.0
    print(f"coverage ({strategy}): bound > ln 1.5 in {exceed}/{N_TRIALS}, > 0 in {positive}/{N_TRIALS}")
    assert exceed <= 20
    assert positive >= 0.9 * N_TRIALS  # and it has power


@pytest.mark.parametrize("mu", [1.0, 2.0])
def test_bonferroni_power_and_validity_gaussian(mu):
    gen = np.random.default_rng(7)
    members, nonmembers = gen.normal(mu, 1, 20_000), gen.normal(0, 1, 20_000)
    grid = Bonferroni(tuple(np.linspace(-1.0, 4.0, 26)))
    bound = epsilon_lower_bound(members, nonmembers, delta=1e-5, strategy=grid)
    assert 0.0 < bound <= gaussian_dp_epsilon(mu, 1e-5)


# ---------------------------------------------------------------------------
# validation


def test_strategy_dataclasses_validate():
    for frac in (0.0, 1.0, -0.5, float("nan")):
        with pytest.raises(ValueError, match=re.escape(f"got {frac}")):
            Split(frac)
    with pytest.raises(ValueError, match="non-empty"):
        Bonferroni(())
    with pytest.raises(ValueError, match="finite"):
        Bonferroni((0.0, float("nan")))
    assert Bonferroni([1, 2]).thresholds == (1.0, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Split().frac = 0.3


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5, -0.2, float("nan")])
def test_bad_confidence(confidence):
    with pytest.raises(ValueError, match=re.escape(f"confidence must be in (0, 1), got {confidence}")):
        epsilon_lower_bound([1.0, 2.0], [0.0, 1.0], confidence=confidence)


@pytest.mark.parametrize("delta", [-0.1, 1.0, 2.0])
def test_bad_delta(delta):
    with pytest.raises(ValueError, match=re.escape(f"delta must be in [0, 1), got {delta}")):
        epsilon_lower_bound([1.0, 2.0], [0.0, 1.0], delta=delta)


def test_bad_scores():
    with pytest.raises(ValueError, match="member_scores must be non-empty"):
        epsilon_lower_bound([], [0.0, 1.0])
    with pytest.raises(ValueError, match="nonmember_scores must be non-empty"):
        epsilon_lower_bound([0.0, 1.0], [])
    with pytest.raises(ValueError, match=re.escape("nan at index 1")):
        epsilon_lower_bound([0.0, np.nan], [0.0, 1.0])
    with pytest.raises(ValueError, match="at least 2"):
        epsilon_lower_bound([1.0], [0.0, 1.0])  # cannot split a single score
    with pytest.raises(TypeError, match="strategy"):
        epsilon_lower_bound([1.0, 2.0], [0.0, 1.0], strategy="split")


# ---------------------------------------------------------------------------
# Gaussian DP


def gdp_delta(eps, mu):
    """delta(eps) of mu-GDP, computed directly (fine where both terms are >> 1e-16)."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("mu, delta", [(0.5, 1e-3), (1.0, 1e-5), (2.0, 1e-5), (1.0, 0.05)])
def test_gaussian_dp_epsilon_solves_delta_equation(mu, delta):
    eps = gaussian_dp_epsilon(mu, delta)
    assert eps > 0.0
    assert gdp_delta(eps, mu) == pytest.approx(delta, abs=1e-9)


def test_gaussian_dp_epsilon_known_values():
    # delta(0) = Phi(mu/2) - Phi(-mu/2) = 2 Phi(mu/2) - 1; at or above it, eps = 0.
    assert gaussian_dp_epsilon(1.0, 2 * norm.cdf(0.5) - 1) == 0.0
    assert gaussian_dp_epsilon(1.0, 0.5) == 0.0
    assert gaussian_dp_epsilon(0.0, 1e-5) == 0.0
    assert gaussian_dp_epsilon(1.0, 0.0) == math.inf
    # Reference values (root of delta(eps) = delta, cross-checked at 60 digits with mpmath).
    assert gaussian_dp_epsilon(1.0, 1e-5) == pytest.approx(4.377178095681224, rel=1e-10)
    assert gaussian_dp_epsilon(2.0, 1e-5) == pytest.approx(9.997256146434301, rel=1e-10)


def test_gaussian_dp_epsilon_stable_for_tiny_delta():
    # At mu=50 the root is eps ~ 1600: e^eps overflows a float, so delta(eps) must be
    # evaluated in log space (mpmath references at 60 digits).
    assert gaussian_dp_epsilon(10.0, 1e-10) == pytest.approx(112.84032670423225, rel=1e-10)
    assert gaussian_dp_epsilon(50.0, 1e-12) == pytest.approx(1600.7886583055777, rel=1e-10)
    values = [gaussian_dp_epsilon(3.0, d) for d in (1e-3, 1e-6, 1e-9, 1e-12, 1e-15)]
    assert all(np.isfinite(values)) and np.all(np.diff(values) > 0)


def test_gaussian_dp_epsilon_monotone_in_mu():
    values = [gaussian_dp_epsilon(mu, 1e-5) for mu in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)]
    assert np.all(np.diff(values) > 0)


def test_gaussian_dp_epsilon_validation():
    with pytest.raises(ValueError, match=re.escape("got -1.0")):
        gaussian_dp_epsilon(-1.0, 1e-5)
    with pytest.raises(ValueError, match=re.escape("delta must be in [0, 1), got 1.0")):
        gaussian_dp_epsilon(1.0, 1.0)
