"""Tests for audit.stats.epsilon: the one-run bound's exact values, validity under the null, power, GDP."""

import math
import re

import numpy as np
import pytest
from scipy.stats import binom, norm

from audit.stats import guesses
from audit.stats.epsilon import (
    _binomial_pmf,
    epsilon_ceiling,
    epsilon_lower_bound,
    gaussian_dp_epsilon,
    guess_grid,
    one_run_audit,
    one_run_epsilon,
    one_run_p_value,
)

N_TRIALS = 200


def canaries_needed(claimed, **kwargs):
    """Steinke et al.'s bound on the grid: the rule `epsilon_ceiling` is."""
    return guesses.canaries_needed(claimed, analysis="steinke", rule="grid", **kwargs)


def most_certifiable(**kwargs):
    return guesses.most_certifiable(analysis="steinke", rule="grid", **kwargs)


# A bound valid at 95% confidence fails (is > 0 on null scores) with prob <= 0.05 per trial; the
# requirement is 0.0 in >= 95% of 200 trials, i.e. at most 10 failures.
MAX_NULL_FAILURES = 10


# ---------------------------------------------------------------------------
# the theorem's p-value, by hand


def test_p_value_single_fair_guess():
    # m = r = v = 1, eps = 0: P[Binomial(1, 1/2) >= 1] = 1/2
    assert one_run_p_value(m=1, guesses=1, correct=1, epsilon=0.0, delta=0.0) == pytest.approx(0.5, rel=1e-12)
    assert one_run_p_value(m=5, guesses=3, correct=0, epsilon=1.0, delta=0.1) == 1.0  # no correct guess, no evidence


def test_p_value_delta_term_by_hand():
    # m = 10, r = v = 2, eps = 0 (p = 1/2), delta = 0.01:
    #   tail P[B >= 2] = 1/4;  max over i of P[2-i <= B < 2] / i: i = 1: P[B = 1] = 1/2; i = 2: P[B < 2] / 2 = 3/8
    #   p-value = 1/4 + 2 * 10 * 0.01 * 1/2 = 0.35
    assert one_run_p_value(m=10, guesses=2, correct=2, epsilon=0.0, delta=0.01) == pytest.approx(0.35, rel=1e-12)


def test_the_delta_term_s_binomial_pmf_is_scipy_s_to_the_last_bit():
    # `_delta_ratio` reads the pmf without scipy's argument checks: on every k of a design, bit for bit
    # (array_equal, not approx), at p = e^eps / (1 + e^eps) and at the ends of [0, 1]
    rng = np.random.default_rng(0)
    for n in (1, 2, 10, 999, 1000, 24_000):
        k = np.arange(n + 1)
        for p in (0.0, 0.5, 1.0, 1.0 / (1.0 + math.exp(-2.345)), *rng.random(3)):
            np.testing.assert_array_equal(_binomial_pmf(k[::-1], n, p), binom.pmf(k[::-1], n, p))


def test_p_value_is_non_decreasing_in_epsilon():
    # one_run_epsilon's binary search relies on it; checked on a grid of designs, with and without delta
    for m, r, v in [(100, 100, 100), (1000, 250, 200), (28752, 28752, 16000), (5000, 50, 45), (20, 10, 10)]:
        for delta in (0.0, 1e-5, 1e-3):
            values = [
                one_run_p_value(m=m, guesses=r, correct=v, epsilon=e, delta=delta) for e in np.linspace(0, 12, 121)
            ]
            assert np.all(np.diff(values) >= -1e-12), (m, r, v, delta)


def test_epsilon_of_a_perfect_attack_by_hand():
    # delta = 0, r = v = 100, alpha = 0.05: rejected while p^100 < 0.05, so the bound is
    # eps = ln(p / (1 - p)) at p = 0.05^(1/100) = 0.970487..., i.e. eps = 3.4930...
    p = 0.05 ** (1 / 100)
    assert one_run_epsilon(m=100, guesses=100, correct=100, delta=0.0, alpha=0.05) == pytest.approx(
        math.log(p / (1 - p)), abs=1e-9
    )
    # half the guesses right is what eps = 0 predicts: nothing rejected
    assert one_run_epsilon(m=100, guesses=100, correct=50, delta=0.0, alpha=0.05) == 0.0


def test_guess_grid_is_fixed_by_m():
    # m = 1000: r = round(1000 / 2^k) for k = 0..11 -> 1000, 500, 250, 125, 62, 31, 16, 8, 4, 2, 1, (0 -> 1);
    # each r gives (r, 0) and (round(r/2), r - round(r/2)); r = 1 gives (1, 0) twice. 11 * 2 - 1 = 21 points.
    grid = guess_grid(1000)
    assert len(grid) == 21 and grid[:4] == ((1000, 0), (500, 500), (500, 0), (250, 250))
    assert all(k_in >= 1 and k_in + k_out <= 1000 for k_in, k_out in grid)
    assert guess_grid(1) == ((1, 0),)


def test_ceiling_by_hand_pure_dp():
    # delta = 0: the largest r = m gives the most; rejected while p^1000 < 0.05 / 21
    p = (0.05 / 21) ** (1 / 1000)
    assert epsilon_ceiling(1000) == pytest.approx(math.log(p / (1 - p)), abs=1e-9)
    # and a perfect attack on those m canaries attains it exactly
    assert epsilon_lower_bound(np.ones(500), np.zeros(500), rng=0) == pytest.approx(epsilon_ceiling(1000), abs=1e-9)


def test_ceiling_with_delta_saturates():
    # 2 m delta grows with m: at delta = 1e-5 the ceiling stays near 5 however many canaries, while
    # delta = 0 keeps growing. The design's m = 24,000 (16 targets x 1,500): guess_grid(24000) has 24
    # points (r = 24000, 12000, ..., 23, 12, each as (r, 0) and (r/2, r/2)), each tested at 0.05 / 24.
    # delta = 0: the largest r = m = 24,000 attains it, the closed form ln(p / (1 - p)) with
    #   p = (0.05 / 24)^(1/24000): 8.2654.
    # delta = 1e-5: also r = 24,000 (r = 12,000 gives 4.0908, r = 750 is the first point above 0),
    #   where the p-value crosses 0.05 / 24 at 4.7929.
    p = (0.05 / 24) ** (1 / 24000)
    assert len(guess_grid(24000)) == 24
    assert epsilon_ceiling(24000) == pytest.approx(math.log(p / (1 - p)), abs=1e-9)
    assert epsilon_ceiling(24000) == pytest.approx(8.2654, abs=5e-4)
    assert epsilon_ceiling(24000, delta=1e-5) == pytest.approx(4.7929, abs=5e-4)
    assert one_run_epsilon(m=24000, guesses=24000, correct=24000, delta=1e-5, alpha=0.05 / 24) == pytest.approx(
        epsilon_ceiling(24000, delta=1e-5), abs=1e-12
    )
    # most_certifiable(delta = 1e-5): ceilings over m = 1, 2, 4, ... rise to 5.0666 at m = 2,048 (grid of 23
    # points, r = 2048 all guessed IN, tested at 0.05 / 23) and fall at 4,096 (4.9438), where the search stops.
    assert most_certifiable(delta=1e-5, confidence=0.95) == pytest.approx(5.0666, abs=5e-4)
    assert len(guess_grid(2048)) == 23
    assert most_certifiable(delta=1e-5, confidence=0.95) == pytest.approx(
        one_run_epsilon(m=2048, guesses=2048, correct=2048, delta=1e-5, alpha=0.05 / 23), abs=1e-12
    )
    assert epsilon_ceiling(4096, delta=1e-5) == pytest.approx(4.9438, abs=5e-4)
    assert canaries_needed(10.0, delta=1e-5) is None  # a claim of eps = 10 is never testable this way
    # ceilings at delta = 1e-5: 3.7358 at m = 256, 4.3702 at 512
    assert canaries_needed(4.0, delta=1e-5) == 512
    # delta = 0: 9.963 at 2^17, 10.656 at 2^18
    needed = canaries_needed(10.0)
    assert needed == 2**18
    assert epsilon_ceiling(needed) > 10.0 >= epsilon_ceiling(needed // 2)


# ---------------------------------------------------------------------------
# the guessing rule


def test_guesses_count_members_at_the_top_and_non_members_at_the_bottom():
    # 1000 canaries; the 100 highest scores are members, the 100 lowest non-members, the other 800
    # (half members) tied. The largest grid point inside the sure guesses is r = 125 as (62, 63):
    # 125 correct of 125, so the bound is that of a perfect attack with r = 125 at alpha = 0.05 / 21,
    # eps = ln(p / (1 - p)) with p = (0.05 / 21)^(1/125) = 3.0056...; larger points reach into the ties.
    members = np.concatenate([np.full(100, 5.0), np.zeros(400)])
    nonmembers = np.concatenate([np.full(100, -5.0), np.zeros(400)])
    result = one_run_audit(members, nonmembers, rng=0)
    assert (result.m, result.grid_size, result.guesses_in, result.guesses_out, result.correct) == (
        1000,
        21,
        62,
        63,
        125,
    )
    p = (0.05 / 21) ** (1 / 125)
    assert result.epsilon == pytest.approx(math.log(p / (1 - p)), abs=1e-9)


def test_same_rng_same_bound_and_ties_do_not_need_one():
    gen = np.random.default_rng(1)
    members, nonmembers = gen.normal(0.5, 1, 2000), gen.normal(0, 1, 2000)
    assert epsilon_lower_bound(members, nonmembers, rng=5) == epsilon_lower_bound(members, nonmembers, rng=5) > 0


def test_reversed_scores_give_zero():
    # members all below non-members: every IN guess (top) is wrong and every OUT guess (bottom) wrong
    assert epsilon_lower_bound(np.zeros(500), np.ones(500), rng=0) == 0.0


# ---------------------------------------------------------------------------
# null validity: no membership signal -> exactly 0.0 with prob >= confidence


NULL_SAMPLERS = {
    "gaussian": lambda gen: gen.normal(0, 1, 1000),
    "discrete_ties": lambda gen: gen.integers(0, 4, 1000).astype(float),  # 4 values, heavy ties
}


@pytest.mark.parametrize("name", sorted(NULL_SAMPLERS))
@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_null_validity(name, delta):
    zeros = 0
    for seed in range(N_TRIALS):
        gen = np.random.default_rng(seed)
        scores = NULL_SAMPLERS[name](gen)
        coins = gen.random(scores.size) < 0.5
        zeros += epsilon_lower_bound(scores[coins], scores[~coins], delta=delta, rng=gen) == 0.0
    print(f"null ({name}, delta {delta}): 0.0 in {zeros}/{N_TRIALS} trials")
    assert zeros >= N_TRIALS - MAX_NULL_FAILURES, f"0.0 in only {zeros}/{N_TRIALS}"


def test_power_and_validity_on_gaussian_scores():
    # Canaries' scores N(mu, 1) if IN, N(0, 1) if OUT: a mu-GDP "mechanism" per canary, whose
    # (eps, 1e-5) is gaussian_dp_epsilon(mu, 1e-5) (9.997 at mu = 2): the bound must stay below it
    # and find something.
    gen = np.random.default_rng(7)
    coins = gen.random(20_000) < 0.5
    scores = np.where(coins, gen.normal(2.0, 1, coins.size), gen.normal(0, 1, coins.size))
    bound = epsilon_lower_bound(scores[coins], scores[~coins], delta=1e-5, rng=0)
    assert 1.0 < bound <= gaussian_dp_epsilon(2.0, 1e-5)


# ---------------------------------------------------------------------------
# validation


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
    with pytest.raises(ValueError, match="need 0 <= correct <= guesses <= m"):
        one_run_p_value(m=3, guesses=4, correct=1, epsilon=1.0, delta=0.0)


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


@pytest.mark.parametrize(
    "mu, expected",
    # roots of delta(eps) = 1e-5 by mpmath at 60 digits; these mu raised ValueError before (the
    # bracket's doubling reached eps/mu ~ 1e4, where delta(eps)'s two terms cancel to NaN)
    [(2.9e-5, 3.2871735915297512e-6), (5e-5, 2.4644762513902517e-5), (8e-5, 6.2218914514489321e-5)],
)
def test_gaussian_dp_epsilon_tiny_mu(mu, expected):
    assert gaussian_dp_epsilon(mu, 1e-5) == pytest.approx(expected, rel=1e-9)


def test_gaussian_dp_epsilon_defined_on_its_whole_domain():
    # mu too small for delta: delta(0) = 2 Phi(mu/2) - 1 <= 1e-5 for mu <= 2 sqrt(2) erfinv(1e-5)
    # = 2.5066e-5 (mpmath), so eps = 0 there; above it a finite eps > 0, rising with mu.
    assert gaussian_dp_epsilon(2.5e-5, 1e-5) == 0.0
    values = [gaussian_dp_epsilon(float(mu), 1e-5) for mu in np.geomspace(2.51e-5, 20.0, 400)]
    assert np.all(np.isfinite(values)) and values[0] > 0 and np.all(np.diff(values) > 0)


def test_gaussian_dp_epsilon_monotone_in_mu():
    values = [gaussian_dp_epsilon(mu, 1e-5) for mu in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)]
    assert np.all(np.diff(values) > 0)


def test_gaussian_dp_epsilon_validation():
    with pytest.raises(ValueError, match=re.escape("got -1.0")):
        gaussian_dp_epsilon(-1.0, 1e-5)
    with pytest.raises(ValueError, match=re.escape("delta must be in [0, 1), got 1.0")):
        gaussian_dp_epsilon(1.0, 1.0)
