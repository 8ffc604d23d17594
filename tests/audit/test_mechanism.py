"""Tests for audit.stats.mechanism: the claimed mechanism's own trade-off curve and its f-DP test.

What is checked, and against what:

* the curve is never above the true one and close to it: against the exact Gaussian curve G_μ
  (q = 1 through the numerical path, T = 50) and against the one-step subsampled Gaussian traced
  here directly from its likelihood-ratio tests (T = 1, no composition, no loss grid);
* its ε at δ: exactly `gaussian_dp_epsilon` at q = 1, and opacus's PRV accountant's within 2% for
  the self-test's white-box mechanism at ε = 1 and 4;
* the properties the search relies on: the curve is symmetric and ordered in σ;
* validity and power of the test on an exact subsampled Gaussian, simulated: 200 seeded
  repetitions at the claimed σ raise at most the allowed 5% (with a binomial margin), and a σ
  halved is flagged.
"""

import math

import numpy as np
import pytest
from scipy import special
from scipy.stats import binom, norm

from attacks.whitebox import likelihood_ratio
from audit.stats.epsilon import Guesses, RankedGuesses, gaussian_dp_epsilon
from audit.stats.fdp import gaussian_one_run_mu
from audit.stats.mechanism import (
    NOISE_GRID,
    SubsampledGaussian,
    blow_up_inverse,
    epsilon_at,
    rejects,
    smallest_rejected_noise,
    tradeoff_points,
)


def curve(mechanism, xs):
    alpha, beta = tradeoff_points(mechanism)
    return np.interp(xs, alpha, beta)


XS = np.concatenate([[0.0], np.geomspace(1e-7, 1.0, 400)])


def test_the_curve_is_below_the_exact_gaussian_curve_and_close_to_it():
    # q = 1 through the loss grid and 6 squarings: G_μ with μ = √50 / 5 = 1.414
    mechanism = SubsampledGaussian(5.0, 1.0 - 1e-12, 50)  # q < 1: the numerical path, not the closed form
    exact = norm.cdf(norm.ppf(1.0 - XS) - math.sqrt(50) / 5.0)
    found = curve(mechanism, XS)
    assert (found <= exact + 1e-9).all()
    assert np.max(exact - found) < 0.01  # measured: 0.0046


def one_step_exact(sigma, q, xs):
    """T = 1: f = conv(min(f_rem, f_rem⁻¹)) traced from the threshold tests on x (the likelihood
    ratio increases in x): reject P (the mixture) when x < c, α = P[x < c], β = Q[x >= c]."""
    c = np.linspace(-12 * sigma, 1 + 12 * sigma, 400_001)
    alpha = (1 - q) * special.ndtr(c / sigma) + q * special.ndtr((c - 1) / sigma)
    beta = special.ndtr(-c / sigma)
    from audit.stats.mechanism import _lower_hull

    hx, hy = _lower_hull(np.concatenate([alpha, beta, [0, 1]]), np.concatenate([beta, alpha, [1, 0]]))
    return np.interp(xs, hx, hy)


@pytest.mark.parametrize("sigma,q", [(0.8, 0.3), (2.0, 0.05)])
def test_one_step_of_a_subsampled_gaussian_matches_its_likelihood_ratio_tests(sigma, q):
    exact = one_step_exact(sigma, q, XS)
    found = curve(SubsampledGaussian(sigma, q, 1), XS)
    assert (found <= exact + 1e-6).all()  # the exact trace is itself a 400,001-point polygon
    assert np.max(exact - found) < 0.01


def test_epsilon_at_delta_is_the_gaussian_one_at_full_batch_and_the_prv_accountant_s_when_subsampled():
    # q = 1: exactly μ-GDP with μ = √T / σ = √100 / 4 = 2.5
    assert epsilon_at(SubsampledGaussian(4.0, 1.0, 100), 1e-5) == gaussian_dp_epsilon(2.5, 1e-5)
    # the self-test's white-box mechanism (q = 0.1024, 300 steps) at the σ opacus calibrates to ε = 1
    # and 4 with RDP: opacus's PRV accountant gives 0.918 and 3.675 (measured), the loss grid 0.914
    # and 3.686
    from audit.selftest.mechanisms import WHITEBOX_RATE, WHITEBOX_STEPS, whitebox_sigma, whitebox_true_epsilon

    for claim in (1.0, 4.0):
        sigma = whitebox_sigma(claim)
        found = epsilon_at(SubsampledGaussian(sigma, WHITEBOX_RATE, WHITEBOX_STEPS), 1e-5)
        assert found == pytest.approx(whitebox_true_epsilon(sigma), rel=0.02)


def test_the_curve_is_symmetric_and_grows_with_the_noise():
    mechanism = SubsampledGaussian(1.5, 0.2, 40)
    alpha, beta = tradeoff_points(mechanism)
    assert np.max(np.abs(np.interp(beta, alpha, beta) - alpha)) < 1e-9  # f(f(x)) = x: f⁻¹ = f
    more_noise = curve(mechanism.with_noise(1.5 * 1.01), XS)  # the next point of NOISE_GRID
    assert (more_noise >= curve(mechanism, XS) - 1e-12).all()
    inverse, weaker = blow_up_inverse(mechanism), blow_up_inverse(mechanism.with_noise(1.2))
    assert all(weaker(y) <= inverse(y) <= y + 1e-12 for y in np.linspace(0.0, 1.0, 101))


def test_the_family_search_returns_the_smallest_rejected_grid_noise():
    counts = dict(m=4000, guesses=400, correct=380, alpha=0.05)
    found = smallest_rejected_noise(0.2, 40, **counts)
    i = NOISE_GRID.index(found)
    assert rejects(SubsampledGaussian(found, 0.2, 40), **counts)
    assert not rejects(SubsampledGaussian(NOISE_GRID[i - 1], 0.2, 40), **counts)
    # at q = 1 the exact Gaussian search: σ* = √T / μ*
    mu = gaussian_one_run_mu(**counts)
    assert smallest_rejected_noise(1.0, 40, **counts) == pytest.approx(math.sqrt(40) / mu)
    # nothing found: None
    assert smallest_rejected_noise(0.2, 40, m=4000, guesses=400, correct=200, alpha=0.05) is None


def test_a_noise_so_small_that_one_side_s_loss_is_a_point_mass_still_has_a_curve():
    # σ = 0.05 at q = 0.128: every noise draw of Q lands where the likelihood ratio is 1 - q, so Q's
    # loss is the single value -log(1 - q) = 0.137 (its range held no grid cell, and the family
    # search crashed on bug g's claimed mechanism, σ 2.13, q 0.128, 8 steps, bench/dp_bugs.py)
    tiny = SubsampledGaussian(0.05, 0.128, 8)
    alpha, beta = tradeoff_points(tiny)
    assert alpha[0] == 0.0 and alpha[-1] == 1.0 and np.all(np.diff(beta) <= 1e-12)
    assert 0.0 <= curve(tiny, XS).min() and curve(tiny, XS).max() <= 1.0
    counts = dict(m=8000, guesses=200, correct=150, alpha=0.05)
    found = smallest_rejected_noise(0.128, 8, **counts)
    assert found is not None and rejects(SubsampledGaussian(found, 0.128, 8), **counts)


# the claim: σ = 2 at q = 0.25 over 20 steps, ε = 2.81 at δ = 1e-5 (σ halved: 8.11)
SIGMA, RATE, STEPS, CANARIES, GUESSES, REPETITIONS = 2.0, 0.25, 20, 4000, 400, 200


def simulated_correct(sigma, seed):
    """Correct guesses among the top GUESSES/2 and bottom GUESSES/2 of CANARIES white-box canaries with
    fair coins, each observed over STEPS steps of a subsampled Gaussian at (`sigma`, RATE), scored by
    the likelihood ratio at the CLAIMED σ (what the audit computes): a count fixed in advance."""
    rng = np.random.default_rng(seed)
    coins = rng.random(CANARIES) < 0.5
    sampled = (rng.random((STEPS, CANARIES)) < RATE) & coins
    observations = sampled + sigma * rng.standard_normal((STEPS, CANARIES))
    scores = likelihood_ratio(observations, noise_multiplier=SIGMA, sample_rate=RATE)
    ranked = RankedGuesses.of(scores[coins], scores[~coins], rng=np.random.default_rng([seed, 1]))
    from audit.stats.epsilon import Guesses

    return ranked.correct(Guesses(GUESSES // 2, GUESSES // 2))


def test_the_exact_mechanism_is_rejected_at_most_at_the_level_and_half_the_noise_is_flagged():
    claimed = SubsampledGaussian(SIGMA, RATE, STEPS)
    counts = dict(m=CANARIES, guesses=GUESSES, alpha=0.05)
    alarms = sum(rejects(claimed, correct=simulated_correct(SIGMA, seed), **counts) for seed in range(REPETITIONS))
    # at most 5% in expectation; 20 or more of 200 has probability 0.27% under a true rate of 5%
    # (measured: 0 of 100; median 307 of the 400 guesses right)
    assert binom.sf(19, REPETITIONS, 0.05) < 0.003
    assert alarms <= 19
    # σ halved (ε 8.11): median 369 right; measured 40 of 40 flagged
    flagged = sum(rejects(claimed, correct=simulated_correct(SIGMA / 2, seed), **counts) for seed in range(40))
    assert flagged >= 36


def test_the_lower_bracket_of_epsilon_is_never_above_the_true_one_nor_the_upper_bracket():
    # q = 1 - 1e-12 takes the numerical path (loss grids) to a mechanism whose true ε is known in
    # closed form: μ-GDP with μ = √T / σ = √50 / 5 = 1.414 (up to the 1e-12 of q), ε(1e-5) = 5.05
    mechanism = SubsampledGaussian(5.0, 1.0 - 1e-12, 50)
    exact = gaussian_dp_epsilon(math.sqrt(50) / 5.0, 1e-5)
    lower, upper = epsilon_at(mechanism, 1e-5, side="lower"), epsilon_at(mechanism, 1e-5, side="upper")
    assert lower <= exact <= upper
    # the two brackets are the grid's resolution apart (LOSS_RESOLUTION: 0.05 sd of the composed loss)
    assert upper - lower < 0.03 * exact
    # a subsampled mechanism: the brackets are ordered and close (q 0.25, 20 steps, σ 2: ε 2.81)
    sub = SubsampledGaussian(2.0, 0.25, 20)
    lower, upper = epsilon_at(sub, 1e-5, side="lower"), epsilon_at(sub, 1e-5, side="upper")
    assert 0.97 * upper < lower < upper
    with pytest.raises(ValueError, match="side must be one of"):
        epsilon_at(sub, 1e-5, side="middle")


def test_the_family_bound_is_spent_by_the_lower_bracket_and_rejected_agrees_with_sigma_star():
    from audit.stats import guesses as verdicts
    from audit.stats.bounds import MECHANISM
    from audit.stats.mechanism import claim_rejected

    claim = SubsampledGaussian(SIGMA, RATE, STEPS)
    # a claim that falls between two points of NOISE_GRID (1% apart): σ* may be the claim itself
    off_grid = claim.with_noise(2.004)
    assert off_grid.noise_multiplier not in NOISE_GRID
    rng = np.random.default_rng(3)
    for mechanism in (claim, off_grid):
        for shift in (3.0, 1.0, 0.0):  # members' scores this far above the non-members': a leak, less, none
            groups = {"true": (rng.normal(shift, 1.0, 2000), rng.normal(0.0, 1.0, 2000))}
            found = verdicts.mechanism_verdict(
                groups,
                chosen="true",
                guesses=Guesses(200, 200),
                mechanism=mechanism,
                delta=1e-5,
                confidence=0.95,
                rng_of=lambda attack: np.random.default_rng(0),
            )
            sigma = found["noise_rejected"]
            # by construction: rejected exactly when σ* is at or below the claimed σ
            assert found["rejected"] == claim_rejected(sigma, mechanism)
            assert found["rejected"] == (sigma is not None and sigma <= mechanism.noise_multiplier)
            if sigma is not None and sigma > 0:
                # eps_lower is never above the ε its σ* spends by the lower bracket (nor the upper's)
                spent = mechanism.with_noise(sigma)
                assert found["eps_lower"] == epsilon_at(spent, 1e-5, side="lower")
                assert found["eps_lower"] <= epsilon_at(spent, 1e-5, side="upper")
    # the bound of the registry (MECHANISM) reads the same lower bracket
    counts = dict(m=4000, guesses=400, correct=380, alpha=0.05)
    sigma = smallest_rejected_noise(RATE, STEPS, **counts)
    value = MECHANISM.test(**counts, delta=1e-5, mechanism=claim)
    assert value == epsilon_at(claim.with_noise(sigma), 1e-5, side="lower")


def test_the_claim_searched_on_the_grid_is_found_when_it_is_the_threshold():
    counts = dict(m=4000, guesses=400, correct=380, alpha=0.05)
    on_grid = smallest_rejected_noise(0.2, 40, **counts)
    i = NOISE_GRID.index(on_grid)
    # the rejection threshold τ between the last grid σ not rejected and σ* (bisection on rejects; 10 steps leave
    # [low, high] 2^-10 of the grid's 1% step wide: the claims below lie halfway from it to either grid point, as
    # after 30 steps, and each step builds a curve)
    low, high = NOISE_GRID[i - 1], on_grid
    for _ in range(10):
        middle = (low + high) / 2
        low, high = (low, middle) if rejects(SubsampledGaussian(middle, 0.2, 40), **counts) else (middle, high)
    # a claim in (τ, σ*) is rejected by its own test and is the σ* of the search that holds it
    rejected_claim, kept_claim = (high + on_grid) / 2, (NOISE_GRID[i - 1] + low) / 2
    assert rejects(SubsampledGaussian(rejected_claim, 0.2, 40), **counts)
    assert smallest_rejected_noise(0.2, 40, **counts, claimed_noise=rejected_claim) == rejected_claim
    # a claim in (σ_{i-1}, τ) is not rejected, and the search still ends at the grid's σ*
    assert not rejects(SubsampledGaussian(kept_claim, 0.2, 40), **counts)
    assert smallest_rejected_noise(0.2, 40, **counts, claimed_noise=kept_claim) == on_grid
